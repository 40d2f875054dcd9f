//go:build !wasip1

package sdktest

import (
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/k8s"
)

func TestChildAssertions(t *testing.T) {
	d := &k8s.Deployment{ObjectMeta: k8s.ObjectMeta{Name: "web"}, Spec: k8s.DeploymentSpec{
		Template: k8s.PodTemplateSpec{Spec: k8s.PodSpec{Containers: []k8s.Container{{
			Name: "app", Image: "nginx:1.27",
			ReadinessProbe: &k8s.Probe{HTTPGet: &k8s.HTTPGetAction{Path: "/healthz", Port: k8s.FromString("http")}},
			LivenessProbe:  &k8s.Probe{TCPSocket: &k8s.TCPSocketAction{Port: k8s.FromInt32(8080)}},
		}}}},
	}}
	conditions := guest.Conditions{}
	conditions.Set(guest.Condition{Type: "Ready", Status: guest.ConditionTrue, Reason: "Done"}, "2026-01-01T00:00:00Z")
	resp := &guest.Response{
		Children: []map[string]any{d.Child(), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "web"}, "data": map[string]any{"a": "b"}}},
		Status:   map[string]any{"conditions": conditions},
	}
	plain := Child(t, resp, "Deployment", "web")
	if got := plain.NestedString("spec", "template", "spec", "containers"); got != "" {
		t.Errorf("containers read as a string: %q", got)
	}
	containers, _ := plain.NestedField("spec", "template", "spec", "containers")
	if list, _ := containers.([]any); len(list) != 1 {
		t.Fatalf("plain containers: %v", containers)
	}
	typed := ChildAs[k8s.Deployment](t, resp, "Deployment", "web")
	c := typed.Spec.Template.Spec.Containers[0]
	if c.Image != "nginx:1.27" || c.ReadinessProbe.HTTPGet.Port.String() != "http" || c.LivenessProbe.TCPSocket.Port.String() != "8080" || typed.Name != "web" {
		t.Errorf("ChildAs: %+v", c)
	}
	if cm := ChildAs[k8s.ConfigMap](t, resp, "ConfigMap", "web"); cm.Data["a"] != "b" {
		t.Errorf("ChildAs ConfigMap: %+v", cm)
	}
	if r := Condition(t, resp, "Ready"); r.Status != "True" || r.Reason != "Done" {
		t.Errorf("Condition: %+v", r)
	}
}

// failer records a test's failure instead of failing the test.
type failer struct {
	testing.TB
	failed string
}

func (f *failer) Helper() {}
func (f *failer) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestChildAssertionsFail(t *testing.T) {
	resp := &guest.Response{Children: []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}},
	}}
	for name, call := range map[string]func(tb testing.TB){
		"missing child": func(tb testing.TB) { Child(tb, resp, "Secret", "a") },
		"two children":  func(tb testing.TB) { Child(tb, resp, "ConfigMap", "a") },
		"no condition":  func(tb testing.TB) { Condition(tb, resp, "Ready") },
		"wrong JSON type": func(tb testing.TB) {
			ChildAs[k8s.Deployment](tb, &guest.Response{Children: []map[string]any{{"kind": "Deployment", "metadata": map[string]any{"name": "d"}, "spec": "x"}}}, "Deployment", "d")
		},
	} {
		f := &failer{TB: t}
		func() {
			defer func() { _ = recover() }()
			call(f)
		}()
		if f.failed == "" {
			t.Errorf("%s: the assertion did not fail", name)
		}
	}
}
