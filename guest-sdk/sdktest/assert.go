//go:build !wasip1

package sdktest

import (
	"encoding/json"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/k8s"
)

// Child returns the desired child of resp of kind and name as the host
// decodes it (k8s.Plain): maps, slices, strings, float64 numbers and
// booleans, typed members (a k8s.Deployment's spec) encoded and decoded
// again, so that any field reads with guest.Object's accessors. It fails
// t when resp has no such child, or two.
func Child(t testing.TB, resp *guest.Response, kind, name string) guest.Object {
	t.Helper()
	var found guest.Object
	for _, c := range resp.Children {
		o := guest.Object(c)
		if o.NestedString("kind") != kind || o.Name() != name {
			continue
		}
		if found != nil {
			t.Fatalf("the response has two children %s %s", kind, name)
		}
		p, err := k8s.Plain(c)
		if err != nil {
			t.Fatalf("child %s %s does not encode: %v", kind, name, err)
		}
		found = p
	}
	if found == nil {
		t.Fatalf("the response has no child %s %s; its children: %s", kind, name, childNames(resp))
	}
	return found
}

// ChildAs returns the same child decoded into a T, such as k8s.Deployment
// or k8s.Ingress, from its JSON with encoding/json: assertions then read
// typed fields (ChildAs[k8s.Deployment](t, resp, "Deployment",
// "web").Spec.Template.Spec.Containers[0].Image). Members T does not model
// are dropped (its Extra is not filled).
func ChildAs[T any](t testing.TB, resp *guest.Response, kind, name string) T {
	t.Helper()
	var out T
	b, err := json.Marshal(map[string]any(Child(t, resp, kind, name)))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("child %s %s does not decode into %T: %v\n%s", kind, name, out, err, b)
	}
	return out
}

// Condition returns the condition of type typ in resp's status
// (status.conditions, as maps or a guest.Conditions). It fails t when
// there is none.
func Condition(t testing.TB, resp *guest.Response, typ string) guest.Condition {
	t.Helper()
	plain, err := k8s.Plain(map[string]any{"status": resp.Status})
	if err != nil {
		t.Fatalf("the status does not encode: %v", err)
	}
	c, ok := plain.Condition(typ)
	if !ok {
		t.Fatalf("the status has no %s condition: %v", typ, resp.Status)
	}
	return c
}

func childNames(resp *guest.Response) string {
	s := ""
	for i, c := range resp.Children {
		if i > 0 {
			s += ", "
		}
		o := guest.Object(c)
		s += o.NestedString("kind") + " " + o.Name()
	}
	if s == "" {
		return "none"
	}
	return s
}
