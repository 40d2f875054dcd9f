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
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o webapp.wasm ./webapp
package main

import (
	"fmt"
	"sort"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
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
				Events:   []guest.Event{{Type: "Normal", Reason: "TearingDown", Message: fmt.Sprintf("deleting %d children before the WebApp goes", len(req.Children))}},
			}
		}
		return &guest.Response{Finalized: true}
	}

	image := obj.NestedString("spec", "image")
	if image == "" {
		msg := "spec.image is required; set it to the container image to run"
		return &guest.Response{
			Status: map[string]any{"observedGeneration": gen, "conditions": []any{obj.SetCondition(guest.Condition{
				Type: "Ready", Status: "False", ObservedGeneration: gen, Reason: "InvalidSpec", Message: msg,
			}, req.Now)}},
			Error: &guest.Error{Message: msg, Terminal: true},
		}
	}
	port, ok := obj.NestedInt64("spec", "port")
	if !ok {
		port = 80
	}
	expose := true
	if v, found := obj.NestedField("spec", "expose"); found {
		expose, _ = v.(bool)
	}

	data := map[string]any{"IMAGE": image}
	if cfg, ok := obj.NestedField("spec", "config"); ok {
		if m, ok := cfg.(map[string]any); ok {
			for k, v := range m {
				data[k] = fmt.Sprint(v)
			}
		}
	}
	labels := map[string]any{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "wasmreconcile"}
	children := []map[string]any{{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name + "-config", "labels": labels},
		"data":     data,
	}}
	if expose {
		children = append(children, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "labels": labels},
			"spec": map[string]any{
				"selector": map[string]any{"app.kubernetes.io/name": name},
				"ports":    []any{map[string]any{"name": "http", "port": port, "targetPort": port}},
			},
		})
	}

	// Ready once every desired child is observed.
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
		Message: fmt.Sprintf("%d children ready", len(children))}
	if missing > 0 {
		cond.Status, cond.Reason, cond.Message = "False", "Progressing", fmt.Sprintf("waiting for %d of %d children", missing, len(children))
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

func main() {}
