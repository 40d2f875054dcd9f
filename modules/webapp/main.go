// Command webapp is an example module that owns children and uses a
// finalizer. It reconciles examples.wasmreconcile.io/v1alpha1 WebApp objects
// (examples/crds) into:
//
//   - a ConfigMap "<name>-config" holding spec.config plus IMAGE=spec.image;
//   - a Service "<name>" on spec.port (default 80) when spec.expose is true
//     (the default); setting expose to false prunes it.
//
// Its status reports observedGeneration, the children it observes, and a
// Ready condition that turns True once every desired child exists. On
// deletion (the module declares a finalizer) it tears its children down
// first and reports finalized only when none is left.
//
// It builds its children with the SDK's typed objects (package k8s), which
// encode to the bytes the same children written as nested maps encode to,
// at less cost per call (docs/benchmarks.md, "Issue 14: typed children").
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o webapp.wasm ./webapp
package main

import (
	"sort"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/k8s"
)

func init() {
	guest.Handle(guest.Manifest{
		Name: "webapp",
		For:  guest.GVK("examples.wasmreconcile.io", "v1alpha1", "WebApp"),
		Owns: []guest.GroupVersionKind{
			guest.GVK("", "v1", "ConfigMap"),
			guest.GVK("", "v1", "Service"),
		},
		Finalizer: true,
		// Defaults for the operator to use unless it sets its own.
		Limits: &guest.ManifestLimits{Fuel: 50_000_000, TimeoutMillis: 2000, MemoryPages: 512},
	}, Reconcile)
}

// Reconcile computes a WebApp's children and status.
func Reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	name, gen := obj.Name(), obj.Generation()

	if req.Finalizing {
		if len(req.Children) > 0 {
			return &guest.Response{
				Children: guest.NoChildren(), // an empty list deletes every child; nil would leave them
				Events:   []guest.Event{{Type: "Normal", Reason: "TearingDown", Message: guest.Sprintf("deleting %d children before the WebApp goes", len(req.Children))}},
			}
		}
		return &guest.Response{Finalized: true}
	}

	image := obj.NestedString("spec", "image")
	if image == "" {
		return invalidSpec(obj, gen, req.Now, "spec.image is required; set it to the container image to run")
	}
	port, ok := obj.NestedInt64("spec", "port")
	if !ok {
		port = 80
	}
	if port < 1 || port > 65535 { // the CRD's bounds, for objects given offline
		return invalidSpec(obj, gen, req.Now, guest.Sprintf("spec.port %d is outside 1..65535", port))
	}
	expose := true
	if v, found := obj.NestedField("spec", "expose"); found {
		expose, _ = v.(bool)
	}

	data := map[string]string{"IMAGE": image}
	if cfg, ok := obj.NestedField("spec", "config"); ok {
		if m, ok := cfg.(map[string]any); ok {
			for k, v := range m {
				data[k] = guest.Sprint(v)
			}
		}
	}
	labels := map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "wasmreconcile"}
	cm := &k8s.ConfigMap{ObjectMeta: k8s.ObjectMeta{Name: name + "-config", Labels: labels}, Data: data}
	children := []map[string]any{cm.Child()}
	if expose {
		svc := &k8s.Service{
			ObjectMeta: k8s.ObjectMeta{Name: name, Labels: labels},
			Spec: k8s.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": name},
				Ports:    []k8s.ServicePort{{Name: "http", Port: int32(port), TargetPort: k8s.FromInt32(int32(port))}},
			},
		}
		children = append(children, svc.Child())
	}

	// Ready once every desired child is observed. A typed child's kind
	// and metadata are plain values, which guest.Object reads.
	observed := map[string]bool{}
	var names []any
	for _, c := range req.Children {
		o := guest.Object(c)
		key := o.NestedString("kind") + "/" + o.Name()
		observed[key] = true
		names = append(names, key)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].(string) < names[j].(string) })
	missing := 0
	for _, c := range children {
		o := guest.Object(c)
		if !observed[o.NestedString("kind")+"/"+o.Name()] {
			missing++
		}
	}
	cond := guest.Condition{Type: "Ready", Status: "True", ObservedGeneration: gen, Reason: "ChildrenReady",
		Message: guest.Sprintf("%d children ready", len(children))}
	if missing > 0 {
		cond.Status, cond.Reason, cond.Message = "False", "Progressing", guest.Sprintf("waiting for %d of %d children", missing, len(children))
	}
	if names == nil {
		names = []any{}
	}
	return &guest.Response{
		Children: children,
		Status: map[string]any{
			"observedGeneration": gen,
			"children":           names,
			"conditions":         []any{obj.SetCondition(cond, req.Now)},
		},
	}
}

// invalidSpec is the terminal error of an invalid spec, with Ready=False.
func invalidSpec(obj guest.Object, gen int64, now, msg string) *guest.Response {
	return &guest.Response{
		Status: map[string]any{"observedGeneration": gen, "conditions": []any{obj.SetCondition(guest.Condition{
			Type: "Ready", Status: "False", ObservedGeneration: gen, Reason: "InvalidSpec", Message: msg,
		}, now)}},
		Error: &guest.Error{Message: msg, Terminal: true},
	}
}

func main() {}
