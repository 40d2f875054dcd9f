//go:build !wasip1

package sdktest

import (
	"sort"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// Triggered returns the names ("namespace/name", sorted) of the objects of
// the manifest's For kind among h.Objects that the host would reconcile
// when related, an object of a Reads kind, changes, by the manifest's
// Triggers, as docs/abi.md ("Related-object triggers") states the
// mappings. Use it to test that a manifest's triggers reach the objects
// they should, and no others, without a cluster.
//
// Scopes are approximated: reconciled objects are looked for in related's
// namespace when it has one, everywhere otherwise. An empty result means
// no trigger maps related to any object.
func (h *Host) Triggered(related map[string]any) []string {
	rel := guest.Object(related)
	relAPI, relKind := rel.NestedString("apiVersion"), rel.NestedString("kind")
	seen := map[string]bool{}
	for _, t := range h.Manifest.Triggers {
		if apiVersionOf(t.Kind) != relAPI || t.Kind.Kind != relKind {
			continue
		}
		for _, o := range h.Objects {
			obj := guest.Object(o)
			if obj.NestedString("apiVersion") != apiVersionOf(h.Manifest.For) || obj.NestedString("kind") != h.Manifest.For.Kind {
				continue
			}
			if rel.Namespace() != "" && obj.Namespace() != rel.Namespace() {
				continue
			}
			if triggers(t, h.Manifest.For, rel, obj) {
				seen[obj.Namespace()+"/"+obj.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func apiVersionOf(g abi.GroupVersionKind) string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// triggers reports whether trigger t maps related to obj.
func triggers(t abi.Trigger, forKind abi.GroupVersionKind, related, obj guest.Object) bool {
	switch {
	case t.OwnerReference:
		for _, ref := range related.OwnerReferences() {
			group, _, _ := strings.Cut(ref.APIVersion, "/")
			if !strings.Contains(ref.APIVersion, "/") {
				group = ""
			}
			if group == forKind.Group && ref.Kind == forKind.Kind && ref.Name == obj.Name() {
				return true
			}
		}
	case t.Field != "":
		v, _ := obj.NestedField(strings.Split(t.Field, ".")...)
		switch v := v.(type) {
		case string:
			return v != "" && v == related.Name()
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok && s != "" && s == related.Name() {
					return true
				}
			}
		}
	case t.Selector != "":
		v, _ := obj.NestedField(strings.Split(t.Selector, ".")...)
		m, _ := v.(map[string]any)
		return selectorMatches(m, related.Labels())
	case t.All:
		return true
	}
	return false
}

// selectorMatches applies a label selector, a metav1.LabelSelector or a
// plain map of labels, to labels. A missing, empty or malformed selector
// matches nothing, as in the host.
func selectorMatches(sel map[string]any, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	ml, hasLabels := sel["matchLabels"]
	me, hasExprs := sel["matchExpressions"]
	if !hasLabels && !hasExprs {
		ml, hasLabels = any(sel), true
	}
	terms := 0
	if hasLabels {
		m, ok := ml.(map[string]any)
		if !ok && ml != nil {
			return false
		}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return false
			}
			if got, ok := labels[k]; !ok || got != s {
				return false
			}
			terms++
		}
	}
	if hasExprs {
		list, ok := me.([]any)
		if !ok && me != nil {
			return false
		}
		for _, e := range list {
			expr, _ := e.(map[string]any)
			key, _ := expr["key"].(string)
			op, _ := expr["operator"].(string)
			var values []string
			if vs, ok := expr["values"].([]any); ok {
				for _, v := range vs {
					s, _ := v.(string)
					values = append(values, s)
				}
			}
			if (op == "In" || op == "NotIn") == (len(values) == 0) {
				return false // the API server refuses such a selector; it matches nothing
			}
			got, has := labels[key]
			in := false
			for _, v := range values {
				in = in || (has && got == v)
			}
			switch op {
			case "In":
				if !in {
					return false
				}
			case "NotIn":
				if in {
					return false
				}
			case "Exists":
				if !has {
					return false
				}
			case "DoesNotExist":
				if has {
					return false
				}
			default:
				return false
			}
			terms++
		}
	}
	return terms > 0
}
