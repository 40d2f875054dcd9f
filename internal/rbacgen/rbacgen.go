// Package rbacgen derives a module's least-privilege RBAC from its manifest
// (docs/security.md), as rbacv1 objects, and prints them as YAML with
// comments that say why each right is there: what `operator rbac` prints
// and `operator init` writes.
package rbacgen

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// AggregateLabel aggregates a module's watch role into the operator's
// ClusterRole (config/rbac/role.yaml).
const AggregateLabel = "wasmreconcile.io/aggregate-to-operator"

// Options say how Generate names resources and whom it binds. The zero
// value binds no one and guesses every custom kind's resource name.
type Options struct {
	// ServiceAccount is the module's account; the zero value binds
	// nothing.
	ServiceAccount types.NamespacedName
	// Namespaces, when set, bind the module's ClusterRole to the account
	// with a RoleBinding in each instead of a ClusterRoleBinding.
	Namespaces []string
	// Plurals are the resource names of kinds known from their CRDs; any
	// other kind's is guessed (Resource).
	Plurals map[schema.GroupKind]string
	// Scopes, with protocol.Builtin, tell which kinds are cluster-scoped,
	// which a RoleBinding cannot grant.
	Scopes protocol.Scopes
}

// RBAC is a module's least-privilege RBAC.
//
// The module's rights are what the host does as its account
// (docs/security.md): get, list, watch on For (the host reads it for the
// account) and, with a finalizer, patch and update (the finalizer is a
// merge patch of the object); get, update, patch on For's status (a
// server-side apply); with children, update on For's finalizers (the
// children's owner references set blockOwnerDeletion, which the admission
// plugin OwnerReferencesPermissionEnforcement allows only to who may update
// the owner's finalizers); get, list, watch, create, update, patch, delete
// on each Owns kind (created, applied, pruned); get, list, watch on each
// Reads kind; create, patch on events.k8s.io Events (the guest's Events;
// the host's own Warnings are the operator's).
type RBAC struct {
	// Watch is the operator's watches of the module's kinds, aggregated
	// into the operator's ClusterRole by AggregateLabel.
	Watch rbacv1.ClusterRole
	// Module is the module's own rights.
	Module rbacv1.ClusterRole
	// Binding binds Module to Options.ServiceAccount in every namespace;
	// nil without an account or with Options.Namespaces.
	Binding *rbacv1.ClusterRoleBinding
	// RoleBindings bind Module to the account in each of
	// Options.Namespaces.
	RoleBindings []rbacv1.RoleBinding
	// Guessed lists the resources whose names were guessed from their
	// kinds ("resource.group (Kind)"), with no CRD to read them from.
	Guessed []string
	// ClusterScoped lists the resources of cluster-scoped kinds, which no
	// RoleBinding grants.
	ClusterScoped []string

	manifest abi.Manifest
	opts     Options
	why      map[string][]string // the Module role's resources: why each is there
}

// Generate derives the RBAC of a module with manifest m. The same manifest
// and options always give the same RBAC: rules are merged per API group and
// verbs, and sorted.
func Generate(m abi.Manifest, opts Options) (*RBAC, error) {
	r := &RBAC{manifest: m, opts: opts}
	sa := opts.ServiceAccount
	if (sa.Name == "") != (sa.Namespace == "") {
		return nil, fmt.Errorf("--service-account %q: want NAMESPACE/NAME", sa)
	}
	if sa.Name == "" && len(opts.Namespaces) > 0 {
		return nil, errors.New("--namespace says where to bind the module's ClusterRole to its account: pass --service-account NAMESPACE/NAME too")
	}
	namespaces := slices.Compact(slices.Sorted(slices.Values(opts.Namespaces)))
	for _, ns := range namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--namespace %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	r.opts.Namespaces = namespaces
	watch, module := r.rules(m)
	r.Watch = clusterRole("wasmreconcile-watch-"+m.Name, watch.policyRules())
	r.Watch.Labels = map[string]string{AggregateLabel: "true"}
	r.Module = clusterRole("wasmreconcile-module-"+m.Name, module.policyRules())
	r.why = module.whyByResource()
	if sa.Name == "" {
		return r, nil
	}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Module.Name}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	if len(namespaces) == 0 {
		r.Binding = &rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: r.Module.Name}, RoleRef: ref, Subjects: subjects}
		return r, nil
	}
	for _, ns := range namespaces {
		r.RoleBindings = append(r.RoleBindings, rbacv1.RoleBinding{TypeMeta: typeMeta("RoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: r.Module.Name, Namespace: ns}, RoleRef: ref, Subjects: subjects})
	}
	return r, nil
}

// rules collects the operator's watch rules and the module's rules, and
// notes guessed names and cluster-scoped kinds.
func (r *RBAC) rules(m abi.Manifest) (watch, module *ruleSet) {
	scopes := protocol.Builtin
	if r.opts.Scopes != nil {
		scopes = protocol.Chain(protocol.Builtin, r.opts.Scopes)
	}
	resource := func(g abi.GroupVersionKind) string {
		res, fromCRD := Resource(g, r.opts.Plurals)
		gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
		if namespaced, known := scopes.Namespaced(gk); known && !namespaced {
			r.ClusterScoped = append(r.ClusterScoped, qualified(g.Group, res))
		}
		if _, builtin := protocol.Builtin.Namespaced(gk); !builtin && !fromCRD {
			r.Guessed = append(r.Guessed, qualified(g.Group, res)+" ("+g.Kind+")")
		}
		return res
	}
	watch, module = newRuleSet(), newRuleSet()
	read := []string{"get", "list", "watch"}
	forRes := resource(m.For)
	watch.add(m.For.Group, forRes, "reconciled (for)", read...)
	module.add(m.For.Group, forRes, "reconciled (for)", read...)
	if m.Finalizer {
		module.add(m.For.Group, forRes, "patch, update: the module's finalizer", "patch", "update")
	}
	module.add(m.For.Group, forRes+"/status", "its status, written with server-side apply", "get", "update", "patch")
	if len(m.Owns) > 0 {
		module.add(m.For.Group, forRes+"/finalizers", "its children's owner references set blockOwnerDeletion (admission plugin OwnerReferencesPermissionEnforcement)", "update")
	}
	for _, g := range m.Owns {
		res := resource(g)
		watch.add(g.Group, res, "children (owns)", read...)
		module.add(g.Group, res, "children (owns): created, applied with server-side apply, pruned", append(read, "create", "update", "patch", "delete")...)
	}
	for _, g := range m.Reads {
		res := resource(g)
		watch.add(g.Group, res, "read (reads)", read...)
		module.add(g.Group, res, "read with cache_read (reads)", read...)
	}
	module.add("events.k8s.io", "events", "the guest's Events", "create", "patch")
	r.Guessed = slices.Compact(slices.Sorted(slices.Values(r.Guessed)))
	r.ClusterScoped = slices.Compact(slices.Sorted(slices.Values(r.ClusterScoped)))
	return watch, module
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
}

func clusterRole(name string, rules []rbacv1.PolicyRule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

// Resource is the plural resource name of g: its CRD's when plurals has it
// (fromCRD), else the API server's default guess (the lower-cased kind
// pluralized by meta.UnsafeGuessKindToResource), which is right for every
// built-in kind and for CRDs that declare the regular plural.
func Resource(g abi.GroupVersionKind, plurals map[schema.GroupKind]string) (resource string, fromCRD bool) {
	if p, ok := plurals[schema.GroupKind{Group: g.Group, Kind: g.Kind}]; ok {
		return p, true
	}
	plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
	return plural.Resource, false
}

// verbOrder is the order verbs are listed in.
var verbOrder = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// ruleSet collects the verbs each resource needs, and why, and merges them
// into rules.
type ruleSet struct {
	verbs map[schema.GroupResource]map[string]bool
	why   map[schema.GroupResource][]string
}

func newRuleSet() *ruleSet {
	return &ruleSet{verbs: map[schema.GroupResource]map[string]bool{}, why: map[schema.GroupResource][]string{}}
}

func (s *ruleSet) add(group, resource, why string, verbs ...string) {
	gr := schema.GroupResource{Group: group, Resource: resource}
	if s.verbs[gr] == nil {
		s.verbs[gr] = map[string]bool{}
	}
	for _, v := range verbs {
		s.verbs[gr][v] = true
	}
	if !slices.Contains(s.why[gr], why) {
		s.why[gr] = append(s.why[gr], why)
	}
}

// policyRules merges the resources of one API group that need the same
// verbs into one rule, sorted by group, then by first resource.
func (s *ruleSet) policyRules() []rbacv1.PolicyRule {
	type key struct{ group, verbs string }
	merged := map[key]*rbacv1.PolicyRule{}
	for gr, set := range s.verbs {
		var verbs []string
		for _, v := range verbOrder {
			if set[v] {
				verbs = append(verbs, v)
			}
		}
		k := key{gr.Group, strings.Join(verbs, ",")}
		r := merged[k]
		if r == nil {
			r = &rbacv1.PolicyRule{APIGroups: []string{gr.Group}, Verbs: verbs}
			merged[k] = r
		}
		r.Resources = append(r.Resources, gr.Resource)
	}
	out := make([]rbacv1.PolicyRule, 0, len(merged))
	for _, r := range merged {
		sort.Strings(r.Resources)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].APIGroups[0] != out[j].APIGroups[0] {
			return out[i].APIGroups[0] < out[j].APIGroups[0]
		}
		return out[i].Resources[0] < out[j].Resources[0]
	})
	return out
}

// whyByResource is why each resource is in the rules, by resource name.
func (s *ruleSet) whyByResource() map[string][]string {
	out := map[string][]string{}
	for gr, why := range s.why {
		out[gr.Resource] = why
	}
	return out
}

// YAML prints the RBAC as YAML documents, each object marshalled from its
// rbacv1 type, with comments that say what each is for and why each of the
// module's resources is there.
func (r *RBAC) YAML() ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	obj := func(o any) error {
		y, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		b.Write(bytes.ReplaceAll(y, []byte("  creationTimestamp: null\n"), nil))
		return nil
	}
	m := r.manifest
	p("# RBAC of module %s, derived from its manifest by `operator rbac`", m.Name)
	p("# (docs/security.md):")
	p("#   for:       %s", KindList([]abi.GroupVersionKind{m.For}))
	if len(m.Owns) > 0 {
		p("#   owns:      %s", KindList(m.Owns))
	}
	if len(m.Reads) > 0 {
		p("#   reads:     %s", KindList(m.Reads))
	}
	if m.Finalizer {
		p("#   finalizer: yes")
	}
	if len(r.Guessed) > 0 {
		p("#")
		p("# Resource names guessed from their kinds by the API server's default")
		p("# rule (meta.UnsafeGuessKindToResource), with no CRD to read them from:")
		p("#   %s", strings.Join(r.Guessed, ", "))
		p("# A CRD whose spec.names.plural is irregular needs its name fixed here:")
		p("# check with `kubectl api-resources`, or pass --crds DIR.")
	}
	p("#")
	p("# 1. The operator's watches. Its informers run as the operator itself,")
	p("#    in every namespace; this label aggregates the role into the")
	p("#    operator's ClusterRole (config/rbac/role.yaml).")
	if err := obj(r.Watch); err != nil {
		return nil, err
	}
	p("---")
	p("# 2. The module's rights. Every write of the module (children, status,")
	p("#    finalizer) and its guest's Events are made as the ServiceAccount it")
	p("#    runs as, which the operator impersonates, and its reads are")
	p("#    authorized for that account (SubjectAccessReviews). A ClusterRole,")
	p("#    as the operator works in every namespace. Each resource, and why:")
	for _, rule := range r.Module.Rules {
		for _, res := range rule.Resources {
			p("# %s: %s", res, strings.Join(r.why[res], "; "))
		}
	}
	if err := obj(r.Module); err != nil {
		return nil, err
	}
	sa := r.opts.ServiceAccount
	if sa.Name == "" {
		p("# 3. Bind wasmreconcile-module-%s to the account the module runs as", m.Name)
		p("#    (its ReconcileModule's spec.serviceAccountName, else the operator's")
		p("#    --default-service-account): `operator rbac --service-account")
		p("#    NAMESPACE/NAME` prints the binding. A module with no account runs as")
		p("#    the operator itself (single tenant): then bind the role to the")
		p("#    operator's ServiceAccount (wasmreconcile-system/wasmreconcile-operator")
		p("#    as config/rbac deploys it).")
		return b.Bytes(), nil
	}
	p("---")
	p("# 3. The binding to the module's account, %s", sa)
	p("#    (system:serviceaccount:%s:%s). The operator makes the module's", sa.Namespace, sa.Name)
	p("#    writes by impersonating it, so the operator also needs")
	p("#    `impersonate` on this ServiceAccount:")
	if sa.Namespace == "wasmreconcile-modules" {
		p("#    config/rbac/module_accounts.yaml grants it on every account of")
		p("#    wasmreconcile-modules.")
	} else {
		p("#    config/rbac grants it on the accounts of wasmreconcile-modules only;")
		p("#    for this one, bind a Role in %s with verbs [impersonate] on", sa.Namespace)
		p("#    serviceaccounts, resourceNames [%s], to the operator's account.", sa.Name)
	}
	p("#    It needs no right to impersonate users or groups. (If this is the")
	p("#    operator's own account, it impersonates no one.) The account need")
	p("#    not exist: RBAC binds names, and a missing account has no rights.")
	if r.Binding != nil {
		if err := obj(r.Binding); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	p("#    Confined to namespaces %s: a RoleBinding grants the", strings.Join(r.opts.Namespaces, ", "))
	p("#    ClusterRole's rules in its own namespace only; objects elsewhere are")
	p("#    Forbidden to the module.")
	if len(r.ClusterScoped) > 0 {
		p("#    Cluster-scoped, so granted by no RoleBinding: %s;", strings.Join(r.ClusterScoped, ", "))
		p("#    grant them with a ClusterRole and ClusterRoleBinding if the module")
		p("#    needs them.")
	}
	for i, rb := range r.RoleBindings {
		if i > 0 {
			p("---")
		}
		if err := obj(rb); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// qualified is resource.group, as kubectl names a resource ("configmaps"
// for the core group).
func qualified(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// KindList is "group/version Kind, ..." ("v1 ConfigMap" for the core group).
func KindList(gvks []abi.GroupVersionKind) string {
	parts := make([]string, len(gvks))
	for i, g := range gvks {
		av := g.Version
		if g.Group != "" {
			av = g.Group + "/" + g.Version
		}
		parts[i] = av + " " + g.Kind
	}
	return strings.Join(parts, ", ")
}
