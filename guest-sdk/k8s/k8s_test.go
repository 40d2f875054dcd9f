package k8s

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

func TestTypedEncodesAsMaps(t *testing.T) {
	for _, s := range scenarios {
		want, err := jsontree.Append(nil, s.maps("shop"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := jsontree.Append(nil, s.typed("shop"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: typed\n%s\nmaps\n%s", s.name, got, want)
		}
		// encoding/json, which the SDK falls back to for a response it
		// cannot encode itself, writes the same bytes.
		viaJSON, err := json.Marshal(s.typed("shop"))
		if err != nil {
			t.Fatal(err)
		}
		if string(viaJSON) != string(want) {
			t.Errorf("%s: typed through encoding/json\n%s\nmaps\n%s", s.name, viaJSON, want)
		}
	}
}

// TestGolden pins the JSON of a small CronJob, written by hand from the
// Kubernetes API reference.
func TestGolden(t *testing.T) {
	cj := &CronJob{ObjectMeta: ObjectMeta{Name: "db-backup", Namespace: "prod"}, Spec: CronJobSpec{
		Schedule: "@daily", Suspend: new(false), SuccessfulJobsHistoryLimit: new(int32(0)),
		JobTemplate: JobTemplateSpec{Spec: JobSpec{Template: PodTemplateSpec{Spec: PodSpec{
			RestartPolicy: RestartPolicyNever,
			Containers:    []Container{{Name: "b", Image: "busybox", Args: []string{"sh", "-c", "echo <ok> & done"}}},
			Volumes:       []Volume{{Name: "tmp", EmptyDir: &EmptyDirVolumeSource{}}},
		}}}},
	}}
	got, err := json.Marshal(cj)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"db-backup","namespace":"prod"},"spec":{` +
		`"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"args":["sh","-c","echo \u003cok\u003e \u0026 done"],"image":"busybox","name":"b"}],` +
		`"restartPolicy":"Never","volumes":[{"emptyDir":{},"name":"tmp"}]}}}},"schedule":"@daily","successfulJobsHistoryLimit":0,"suspend":false}}`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestZeroValues(t *testing.T) {
	for _, c := range []struct {
		a    jsontree.Appender
		want string
	}{
		{&PodSpec{}, `{}`},
		// A struct that writes {} is left out, even when a non-nil empty map
		// makes it non-zero to encoding/json's omitzero, which writes
		// "resources":{}: the same to the API server.
		{&Container{Resources: ResourceRequirements{Requests: ResourceList{}}}, `{}`},
		{&DeploymentSpec{Replicas: new(int32(0)), Paused: false}, `{"replicas":0}`},
		{&JobSpec{BackoffLimit: new(int32(0)), Suspend: new(false)}, `{"backoffLimit":0,"suspend":false}`},
		{&ServicePort{Port: 80, TargetPort: FromInt32(0)}, `{"port":80,"targetPort":0}`},
		{&ServicePort{Port: 80}, `{"port":80}`},
		{&Volume{Name: "v", EmptyDir: &EmptyDirVolumeSource{}}, `{"emptyDir":{},"name":"v"}`},
		{&PersistentVolumeClaimSpec{StorageClassName: new("")}, `{"storageClassName":""}`},
		{&Service{}, `{"apiVersion":"v1","kind":"Service","metadata":{},"spec":{}}`},
		{&ConfigMap{}, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}`},
	} {
		got, err := c.a.AppendJSON(nil)
		if err != nil || string(got) != c.want {
			t.Errorf("%T: %s, %v; want %s", c.a, got, err, c.want)
		}
	}
}

func TestExtra(t *testing.T) {
	c := &Container{
		Name: "app", Image: "img",
		Extra: map[string]any{
			"livenessProbe": map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": 8080}},
			"image":         "override",    // replaces the modelled field
			"aaa":           true,          // before every modelled key
			"zzz":           []any{1, "x"}, // after every modelled key
			"securityContext": struct { // not the SDK's: encoding/json, through package stdjson
				RunAsNonRoot bool `json:"runAsNonRoot"`
			}{true},
			"workingDir": nil, // explicit null replaces the (empty) modelled field
		},
	}
	_, err := c.AppendJSON(nil)
	if !errors.Is(err, jsontree.ErrUnsupported) || !strings.Contains(err.Error(), "struct { RunAsNonRoot bool") {
		t.Fatalf("a struct in Extra without stdjson: got %v, want an error naming its type", err)
	}
	useStdJSON(t)
	got, err := c.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"aaa":true,"image":"override","livenessProbe":{"httpGet":{"path":"/healthz","port":8080}},"name":"app",` +
		`"securityContext":{"runAsNonRoot":true},"workingDir":null,"zzz":[1,"x"]}`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// Extra on a kind sets top-level members of the child.
	cm := &ConfigMap{ObjectMeta: ObjectMeta{Name: "c", Extra: map[string]any{"finalizers": []any{"x/y"}}},
		Data: map[string]string{"a": "b"}, Extra: map[string]any{"data": map[string]any{"replaced": "1"}}}
	if got, _ := json.Marshal(cm); string(got) != `{"apiVersion":"v1","data":{"replaced":"1"},"kind":"ConfigMap","metadata":{"finalizers":["x/y"],"name":"c"}}` {
		t.Errorf("ConfigMap with Extra: %s", got)
	}

	// A value nothing can encode is an error, not bad JSON.
	bad := &PodSpec{Extra: map[string]any{"x": math.NaN()}}
	if b, err := bad.AppendJSON(nil); err == nil {
		t.Errorf("NaN encoded: %s", b)
	}
	if _, err := json.Marshal(&Deployment{Spec: DeploymentSpec{Template: PodTemplateSpec{Spec: *bad}}}); err == nil {
		t.Error("NaN in a nested Extra encoded")
	}
}

// TestChildReadsAsObject checks that guest.Object's accessors read the
// plain members of a child, and Plain the typed ones.
func TestChildReadsAsObject(t *testing.T) {
	children := backupTyped("db")
	cm, cj := guest.Object(children[0]), guest.Object(children[1])
	if cm.Name() != "db-backup" || cm.NestedString("kind") != "ConfigMap" || cm["data"].(map[string]string)["RETENTION"] != "7" {
		t.Errorf("ConfigMap as an Object: %v", cm)
	}
	if !reflect.DeepEqual(cj.Labels(), labels) || cj.NestedString("apiVersion") != "batch/v1" {
		t.Errorf("CronJob labels %v, apiVersion %q", cj.Labels(), cj.NestedString("apiVersion"))
	}
	if spec, ok := cj["spec"].(*CronJobSpec); !ok || spec.Schedule != "0 3 * * *" {
		t.Errorf("spec is %T, not the *CronJobSpec", cj["spec"])
	}
	plain, err := Plain(cj)
	if err != nil {
		t.Fatal(err)
	}
	if plain.NestedString("spec", "schedule") != "0 3 * * *" || plain.Name() != "db-backup" {
		t.Errorf("Plain: %v", plain)
	}
	if n, _ := plain.NestedInt64("spec", "jobTemplate", "spec", "backoffLimit"); n != 2 {
		t.Errorf("Plain backoffLimit = %d", n)
	}
	want, _ := jsontree.Decode(must(jsontree.Append(nil, backupMaps("db")[1])))
	if !reflect.DeepEqual(map[string]any(plain), want) {
		t.Errorf("Plain = %v\nwant %v", plain, want)
	}
}

func TestSecretAndServiceAccount(t *testing.T) {
	s := &Secret{ObjectMeta: ObjectMeta{Name: "s"}, Type: SecretTypeOpaque, Data: map[string][]byte{"k": []byte("\x00v")}}
	if got, _ := json.Marshal(s); string(got) != `{"apiVersion":"v1","data":{"k":"AHY="},"kind":"Secret","metadata":{"name":"s"},"type":"Opaque"}` {
		t.Errorf("Secret: %s", got)
	}
	if s.Child()["data"].(map[string]string)["k"] != "AHY=" {
		t.Error("Secret data not readable as base64")
	}
	a := &ServiceAccount{ObjectMeta: ObjectMeta{Name: "a"}, AutomountServiceAccountToken: new(false),
		ImagePullSecrets: []LocalObjectReference{{Name: "regcred"}}}
	if got, _ := json.Marshal(a); string(got) != `{"apiVersion":"v1","automountServiceAccountToken":false,"imagePullSecrets":[{"name":"regcred"}],"kind":"ServiceAccount","metadata":{"name":"a"}}` {
		t.Errorf("ServiceAccount: %s", got)
	}
}

func TestIntOrString(t *testing.T) {
	if FromInt32(8080).String() != "8080" || FromString("http").String() != "http" || (IntOrString{}).String() != "" {
		t.Error("String")
	}
	if !(IntOrString{}).IsZero() || FromInt32(0).IsZero() {
		t.Error("IsZero")
	}
	b, _ := json.Marshal(map[string]any{"a": FromInt32(-3), "b": FromString("x"), "c": IntOrString{}})
	if string(b) != `{"a":-3,"b":"x","c":null}` {
		t.Errorf("MarshalJSON: %s", b)
	}
}

// The response handler of TestDispatch.
var response *guest.Response

func init() {
	guest.Handle(guest.Manifest{Name: "k8stest", For: guest.GVK("example.io", "v1", "Thing")},
		func(*guest.Request) *guest.Response { return response })
}

// useStdJSON makes encoding/json the encoder of the values the SDK does
// not handle, as importing package stdjson does, for the rest of the test.
func useStdJSON(t *testing.T) {
	jsontree.SetFallback(json.Marshal)
	t.Cleanup(func() { jsontree.SetFallback(nil) })
}

type point struct{ X, Y int }

// TestDispatch encodes typed children in a response, through the SDK's
// encoder and through its encoding/json fallback (a struct in the status).
func TestDispatch(t *testing.T) {
	useStdJSON(t)
	req := []byte(`{"object":{"metadata":{"name":"x"}},"attempt":0,"now":"2026-01-01T00:00:00Z"}`)
	for _, s := range scenarios {
		response = &guest.Response{Children: s.maps("shop")}
		want := string(guest.Dispatch(req))
		response = &guest.Response{Children: s.typed("shop")}
		if got := string(guest.Dispatch(req)); got != want {
			t.Errorf("%s: typed\n%s\nmaps\n%s", s.name, got, want)
		}
		if !strings.Contains(want, `"children":[{"apiVersion"`) {
			t.Errorf("%s: no children in %s", s.name, want)
		}
		response = &guest.Response{Children: s.maps("shop"), Status: map[string]any{"c": point{1, 2}}}
		want = string(guest.Dispatch(req))
		if !strings.Contains(want, `"status":{"c":{"X":1,"Y":2}}`) {
			t.Errorf("%s: the struct is not in %s", s.name, want)
		}
		response = &guest.Response{Children: s.typed("shop"), Status: map[string]any{"c": point{1, 2}}}
		if got := string(guest.Dispatch(req)); got != want {
			t.Errorf("%s, encoding/json fallback: typed\n%s\nmaps\n%s", s.name, got, want)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
