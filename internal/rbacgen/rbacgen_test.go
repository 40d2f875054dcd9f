package rbacgen

import (
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

// TestYAMLIsTheObjects: every document YAML prints decodes strictly into
// the very object Generate built, so the text cannot say more or less than
// the objects; comments say why each resource is there.
func TestYAMLIsTheObjects(t *testing.T) {
	m := abi.Manifest{Name: "shop", For: abi.GroupVersionKind{Group: "shop.example.com", Version: "v1", Kind: "Shop"},
		Owns:  []abi.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}, {Group: "apps", Version: "v1", Kind: "Deployment"}},
		Reads: []abi.GroupVersionKind{{Version: "v1", Kind: "Namespace"}}, Finalizer: true}
	for _, namespaces := range [][]string{nil, {"team-b", "team-a", "team-b"}} {
		r, err := Generate(m, Options{ServiceAccount: types.NamespacedName{Namespace: "mods", Name: "shop"}, Namespaces: namespaces})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.YAML()
		if err != nil {
			t.Fatal(err)
		}
		want := []any{r.Watch, r.Module}
		if r.Binding != nil {
			want = append(want, *r.Binding)
		}
		for _, rb := range r.RoleBindings {
			want = append(want, rb)
		}
		docs := strings.Split(string(out), "\n---\n")
		if len(docs) != len(want) {
			t.Fatalf("namespaces %v: %d documents, want %d:\n%s", namespaces, len(docs), len(want), out)
		}
		for i, doc := range docs {
			got := reflect.New(reflect.TypeOf(want[i]))
			if err := yaml.UnmarshalStrict([]byte(doc), got.Interface()); err != nil {
				t.Fatalf("document %d: %v\n%s", i, err, doc)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), want[i]) {
				t.Errorf("document %d decodes to\n%+v\nwant\n%+v", i, got.Elem().Interface(), want[i])
			}
		}
		if len(namespaces) > 0 && (len(r.RoleBindings) != 2 || r.RoleBindings[0].Namespace != "team-a" || r.Binding != nil) {
			t.Errorf("namespaces %v: want one RoleBinding in each of team-a, team-b, and no ClusterRoleBinding: %+v %+v", namespaces, r.RoleBindings, r.Binding)
		}
		for _, line := range []string{"# shops: reconciled (for); patch, update: the module's finalizer", "# shops/finalizers: its children's owner references"} {
			if !strings.Contains(string(out), line) {
				t.Errorf("the output lacks %q:\n%s", line, out)
			}
		}
		if len(namespaces) > 0 && !strings.Contains(string(out), "Cluster-scoped, so granted by no RoleBinding: namespaces;") {
			t.Errorf("a RoleBinding cannot grant namespaces, and the output does not say so:\n%s", out)
		}
	}
}

// TestGenerateRules: the module's rules are exactly what the host does as
// its account, merged per group and verbs.
func TestGenerateRules(t *testing.T) {
	m := abi.Manifest{Name: "w", For: abi.GroupVersionKind{Group: "x.io", Version: "v1", Kind: "Widget"}}
	r, err := Generate(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"x.io"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"x.io"}, Resources: []string{"widgets/status"}, Verbs: []string{"get", "update", "patch"}},
	}
	if !reflect.DeepEqual(r.Module.Rules, want) {
		t.Errorf("rules:\n got %v\nwant %v", r.Module.Rules, want)
	}
	if r.Watch.Labels[AggregateLabel] != "true" || r.Binding != nil || len(r.Guessed) != 1 {
		t.Errorf("watch labels %v, binding %v, guessed %v", r.Watch.Labels, r.Binding, r.Guessed)
	}
	for _, bad := range []Options{
		{Namespaces: []string{"a"}},
		{ServiceAccount: types.NamespacedName{Name: "only-a-name"}},
		{ServiceAccount: types.NamespacedName{Namespace: "a", Name: "b"}, Namespaces: []string{"Not_A_Namespace"}},
	} {
		if _, err := Generate(m, bad); err == nil {
			t.Errorf("Generate with %+v: no error", bad)
		}
	}
}
