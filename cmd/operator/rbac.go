package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

const rbacUsage = `Usage: operator rbac [flags] MODULE.wasm

Loads a module offline (only its initializer and manifest export run) and
prints, as YAML, the least-privilege RBAC that its manifest implies
(docs/security.md):

  1. ClusterRole wasmreconcile-watch-NAME: get, list, watch on the kinds the
     module reconciles, owns and reads, for the operator's informers, which
     run as the operator in every namespace. It carries the label
     wasmreconcile.io/aggregate-to-operator, which aggregates it into the
     operator's ClusterRole (config/rbac).
  2. ClusterRole wasmreconcile-module-NAME: what the module's own writes,
     made as its ServiceAccount, and its reads need: its kind (and patch,
     update for a finalizer), its status, its children, the kinds it reads,
     and events.k8s.io Events.
  3. With --service-account, the binding of (2) to that account: a
     ClusterRoleBinding, or a RoleBinding in each --namespace.

Resource names are the kinds pluralized by the API server's default rule;
pass --crds DIR to take custom kinds' plurals from their CRDs. The output is
deterministic: rules merged per API group and verbs, sorted.

Examples:
  operator rbac webapp.wasm
  operator rbac --crds examples/crds --service-account wasmreconcile-modules/webapp webapp.wasm | kubectl apply -f -

Flags:
`

func runRBAC(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rbac", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rbacUsage); fs.PrintDefaults() }
	var (
		opts       rbacOptions
		namespaces stringList
		crds       string
	)
	fs.StringVar(&opts.ServiceAccount, "service-account", "", "NAMESPACE/NAME of the ServiceAccount the module runs as: also print the binding of its ClusterRole to it")
	fs.Var(&namespaces, "namespace", "bind the module's ClusterRole to --service-account with a RoleBinding in this namespace only, confining the module to it (repeatable; default: a ClusterRoleBinding, every namespace)")
	fs.StringVar(&crds, "crds", "", "directory of CustomResourceDefinition YAML files: the plural resource names of custom kinds (default: guessed from the kind)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 {
		return errors.New("operator rbac: want one module, MODULE.wasm; see operator rbac --help")
	}
	opts.Namespaces = namespaces
	if crds != "" {
		objs, err := offline.ReadObjectDir(crds)
		if err != nil {
			return fmt.Errorf("--crds: %w", err)
		}
		opts.Plurals = crdPlurals(objs)
		opts.Scopes = protocol.CRDScopes(objs)
	}
	m, err := readManifest(context.Background(), pos[0])
	if err != nil {
		return err
	}
	out, err := moduleRBAC(m, opts)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// readManifest loads the module at path, on wazero's interpreter (only its
// initializer and manifest run, so compiling would be wasted), and returns
// its manifest as the engine validated it.
func readManifest(ctx context.Context, path string) (abi.Manifest, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return abi.Manifest{}, err
	}
	eng, err := engine.New(engine.Options{Interpreter: true})
	if err != nil {
		return abi.Manifest{}, err
	}
	defer eng.Close(ctx)
	m, err := eng.Load(ctx, filepath.Base(path), wasm, engine.Limits{MaxInstances: 1, FreshInstancePerCall: true})
	if err != nil {
		return abi.Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	defer m.Close(ctx)
	return m.Manifest(), nil
}

// crdPlurals maps each kind a CustomResourceDefinition of objs defines to
// its spec.names.plural; other objects are ignored.
func crdPlurals(objs []map[string]any) map[schema.GroupKind]string {
	out := map[schema.GroupKind]string{}
	for _, o := range objs {
		if o["kind"] != "CustomResourceDefinition" {
			continue
		}
		spec, _ := o["spec"].(map[string]any)
		names, _ := spec["names"].(map[string]any)
		group, _ := spec["group"].(string)
		kind, _ := names["kind"].(string)
		plural, _ := names["plural"].(string)
		if kind != "" && plural != "" {
			out[schema.GroupKind{Group: group, Kind: kind}] = plural
		}
	}
	return out
}

// rbacOptions say how moduleRBAC names resources and whom it binds.
type rbacOptions struct {
	// ServiceAccount is NAMESPACE/NAME of the module's account; "" prints
	// no binding.
	ServiceAccount string
	// Namespaces, when set, bind the module's ClusterRole to the account
	// with a RoleBinding in each instead of a ClusterRoleBinding.
	Namespaces []string
	// Plurals are the resource names of kinds known from their CRDs; any
	// other kind's is guessed (kindResource).
	Plurals map[schema.GroupKind]string
	// Scopes, with protocol.Builtin, tell which kinds are cluster-scoped,
	// which a RoleBinding cannot grant.
	Scopes protocol.Scopes
}

// kindResource is the plural resource name of g: its CRD's when plurals
// has it (fromCRD), else the API server's default guess (the lower-cased
// kind pluralized by meta.UnsafeGuessKindToResource), which is right for
// every built-in kind and for CRDs that declare the regular plural.
func kindResource(g abi.GroupVersionKind, plurals map[schema.GroupKind]string) (resource string, fromCRD bool) {
	if p, ok := plurals[schema.GroupKind{Group: g.Group, Kind: g.Kind}]; ok {
		return p, true
	}
	plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
	return plural.Resource, false
}

// rbacVerbs is the order verbs are printed in.
var rbacVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// rbacRule is one rule of a role, with why each resource is in it.
type rbacRule struct {
	group     string
	resources []string
	verbs     []string
	why       map[string][]string // by resource
}

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
	for _, w := range s.why[gr] {
		if w == why {
			return
		}
	}
	s.why[gr] = append(s.why[gr], why)
}

// rules merges the resources of one API group that need the same verbs
// into one rule, sorted by group, then by first resource.
func (s *ruleSet) rules() []rbacRule {
	type key struct{ group, verbs string }
	merged := map[key]*rbacRule{}
	for gr, set := range s.verbs {
		var verbs []string
		for _, v := range rbacVerbs {
			if set[v] {
				verbs = append(verbs, v)
			}
		}
		k := key{gr.Group, strings.Join(verbs, ",")}
		r := merged[k]
		if r == nil {
			r = &rbacRule{group: gr.Group, verbs: verbs, why: map[string][]string{}}
			merged[k] = r
		}
		r.resources = append(r.resources, gr.Resource)
		r.why[gr.Resource] = s.why[gr]
	}
	out := make([]rbacRule, 0, len(merged))
	for _, r := range merged {
		sort.Strings(r.resources)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].group != out[j].group {
			return out[i].group < out[j].group
		}
		return out[i].resources[0] < out[j].resources[0]
	})
	return out
}

// moduleRBAC returns the RBAC of a module with manifest m as YAML, with
// comments that say why each right is there: the operator's watches of
// the module's kinds (a ClusterRole aggregated into the operator's), the
// module's own rights (a ClusterRole), and, when opts.ServiceAccount is
// set, their binding to the account. The same manifest and options always
// give the same bytes.
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
func moduleRBAC(m abi.Manifest, opts rbacOptions) ([]byte, error) {
	var saNamespace, saName string
	if opts.ServiceAccount != "" {
		var err error
		if saNamespace, saName, err = operator.ParseServiceAccount(opts.ServiceAccount); err != nil {
			return nil, fmt.Errorf("--service-account: %w", err)
		}
	} else if len(opts.Namespaces) > 0 {
		return nil, errors.New("--namespace says where to bind the module's ClusterRole to its account: pass --service-account NAMESPACE/NAME too")
	}
	namespaces := append([]string(nil), opts.Namespaces...)
	sort.Strings(namespaces)
	namespaces = compactStrings(namespaces)
	for _, ns := range namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--namespace %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	scopes := protocol.Builtin
	if opts.Scopes != nil {
		scopes = protocol.Chain(protocol.Builtin, opts.Scopes)
	}

	var guessed, clusterScoped []string
	resource := func(g abi.GroupVersionKind) string {
		r, fromCRD := kindResource(g, opts.Plurals)
		gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
		if namespaced, known := scopes.Namespaced(gk); known && !namespaced {
			clusterScoped = append(clusterScoped, qualified(g.Group, r))
		}
		if _, builtin := protocol.Builtin.Namespaced(gk); !builtin && !fromCRD {
			guessed = append(guessed, qualified(g.Group, r)+" ("+g.Kind+")")
		}
		return r
	}

	watch, module := newRuleSet(), newRuleSet()
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
		r := resource(g)
		watch.add(g.Group, r, "children (owns)", read...)
		module.add(g.Group, r, "children (owns): created, applied with server-side apply, pruned", append(read, "create", "update", "patch", "delete")...)
	}
	for _, g := range m.Reads {
		r := resource(g)
		watch.add(g.Group, r, "read (reads)", read...)
		module.add(g.Group, r, "read with cache_read (reads)", read...)
	}
	module.add("events.k8s.io", "events", "the guest's Events", "create", "patch")
	sort.Strings(guessed)
	guessed = compactStrings(guessed)
	sort.Strings(clusterScoped)
	clusterScoped = compactStrings(clusterScoped)

	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# RBAC of module %s, derived from its manifest by `operator rbac`", m.Name)
	p("# (docs/security.md):")
	p("#   for:       %s", kindList([]abi.GroupVersionKind{m.For}))
	if len(m.Owns) > 0 {
		p("#   owns:      %s", kindList(m.Owns))
	}
	if len(m.Reads) > 0 {
		p("#   reads:     %s", kindList(m.Reads))
	}
	if m.Finalizer {
		p("#   finalizer: yes")
	}
	if len(guessed) > 0 {
		p("#")
		p("# Resource names guessed from their kinds by the API server's default")
		p("# rule (meta.UnsafeGuessKindToResource), with no CRD to read them from:")
		p("#   %s", strings.Join(guessed, ", "))
		p("# A CRD whose spec.names.plural is irregular needs its name fixed here:")
		p("# check with `kubectl api-resources`, or pass --crds DIR.")
	}
	p("#")
	p("# 1. The operator's watches. Its informers run as the operator itself,")
	p("#    in every namespace; this label aggregates the role into the")
	p("#    operator's ClusterRole (config/rbac/role.yaml).")
	p("apiVersion: rbac.authorization.k8s.io/v1")
	p("kind: ClusterRole")
	p("metadata:")
	p("  name: wasmreconcile-watch-%s", m.Name)
	p("  labels:")
	p(`    wasmreconcile.io/aggregate-to-operator: "true"`)
	writeRules(&b, watch.rules(), false)
	p("---")
	p("# 2. The module's rights. Every write of the module (children, status,")
	p("#    finalizer) and its guest's Events are made as the ServiceAccount it")
	p("#    runs as, which the operator impersonates, and its reads are")
	p("#    authorized for that account (SubjectAccessReviews). A ClusterRole,")
	p("#    as the operator works in every namespace.")
	p("apiVersion: rbac.authorization.k8s.io/v1")
	p("kind: ClusterRole")
	p("metadata:")
	p("  name: wasmreconcile-module-%s", m.Name)
	writeRules(&b, module.rules(), true)
	if opts.ServiceAccount == "" {
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
	p("# 3. The binding to the module's account, %s", opts.ServiceAccount)
	p("#    (system:serviceaccount:%s:%s). The operator makes the module's", saNamespace, saName)
	p("#    writes by impersonating it, so the operator also needs")
	p("#    `impersonate` on this ServiceAccount:")
	if saNamespace == "wasmreconcile-modules" {
		p("#    config/rbac/module_accounts.yaml grants it on every account of")
		p("#    wasmreconcile-modules.")
	} else {
		p("#    config/rbac grants it on the accounts of wasmreconcile-modules only;")
		p("#    for this one, bind a Role in %s with verbs [impersonate] on", saNamespace)
		p("#    serviceaccounts, resourceNames [%s], to the operator's account.", saName)
	}
	p("#    It needs no right to impersonate users or groups. (If this is the")
	p("#    operator's own account, it impersonates no one.) The account need")
	p("#    not exist: RBAC binds names, and a missing account has no rights.")
	if len(namespaces) == 0 {
		p("apiVersion: rbac.authorization.k8s.io/v1")
		p("kind: ClusterRoleBinding")
		p("metadata:")
		p("  name: wasmreconcile-module-%s", m.Name)
		writeBinding(&b, m.Name, saNamespace, saName)
		return b.Bytes(), nil
	}
	p("#    Confined to namespaces %s: a RoleBinding grants the", strings.Join(namespaces, ", "))
	p("#    ClusterRole's rules in its own namespace only; objects elsewhere are")
	p("#    Forbidden to the module.")
	if len(clusterScoped) > 0 {
		p("#    Cluster-scoped, so granted by no RoleBinding: %s;", strings.Join(clusterScoped, ", "))
		p("#    grant them with a ClusterRole and ClusterRoleBinding if the module")
		p("#    needs them.")
	}
	for i, ns := range namespaces {
		if i > 0 {
			p("---")
		}
		p("apiVersion: rbac.authorization.k8s.io/v1")
		p("kind: RoleBinding")
		p("metadata:")
		p("  name: wasmreconcile-module-%s", m.Name)
		p("  namespace: %s", ns)
		writeBinding(&b, m.Name, saNamespace, saName)
	}
	return b.Bytes(), nil
}

// writeRules writes rules as a role's rules field, with a comment per rule
// that says why each resource is there when why is set.
func writeRules(b *bytes.Buffer, rules []rbacRule, why bool) {
	b.WriteString("rules:\n")
	for _, r := range rules {
		if why {
			for _, res := range r.resources {
				fmt.Fprintf(b, "  # %s: %s\n", res, strings.Join(r.why[res], "; "))
			}
		}
		group := r.group
		if group == "" {
			group = `""`
		}
		fmt.Fprintf(b, "  - apiGroups: [%s]\n    resources: [%s]\n    verbs: [%s]\n", group, strings.Join(r.resources, ", "), strings.Join(r.verbs, ", "))
	}
}

func writeBinding(b *bytes.Buffer, module, saNamespace, saName string) {
	fmt.Fprintf(b, "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: wasmreconcile-module-%s\n", module)
	fmt.Fprintf(b, "subjects:\n  - kind: ServiceAccount\n    name: %s\n    namespace: %s\n", saName, saNamespace)
}

// qualified is resource.group, as kubectl names a resource ("configmaps"
// for the core group).
func qualified(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// kindList is "group/version Kind, ..." ("v1 ConfigMap" for the core group).
func kindList(gvks []abi.GroupVersionKind) string {
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

// compactStrings removes adjacent duplicates from a sorted list.
func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// parseInterleaved parses fs from args where flags and positional
// arguments may be interleaved (`operator rbac m.wasm --crds dir`), and
// returns the positional arguments in order. After "--", everything is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
