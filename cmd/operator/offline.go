//go:build !runonly

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/schemacheck"
	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
	"github.com/wasmreconcile/wasmreconcile/internal/servercheck"
)

// limitFlags registers the per-call limit flags shared by invoke and test.
type limitFlags struct {
	fuel       uint64
	timeout    time.Duration
	memory     string
	cacheDir   string
	crds       string
	response   protocol.Limits
	guest      guestLimitFlags
	ceilings   ceilingFlags
	complexity complexityFlags
	reads      offlineReadNamespaces

	opts *offline.Options // options' result: the CRDs are read and built once per command
}

// options returns the offline options: the scopes and schemas of the kinds
// in --crds, and the built-in kinds' schemas.
func (l *limitFlags) options() (offline.Options, error) {
	if l.opts != nil {
		return *l.opts, nil
	}
	o, err := l.buildOptions()
	if err == nil {
		l.opts = &o
	}
	return o, err
}

func (l *limitFlags) buildOptions() (offline.Options, error) {
	if _, err := l.ceilings.ceilings(); err != nil {
		return offline.Options{}, err
	}
	if err := l.guest.apply(&engine.Limits{}); err != nil {
		return offline.Options{}, err
	}
	reads, err := splitNamespaces(l.reads.list)
	if err != nil {
		return offline.Options{}, fmt.Errorf("--read-namespaces: %w", err)
	}
	if l.crds == "" {
		// The built-in kinds' schemas are always there.
		schemas, err := schemacheck.New()
		if err != nil {
			return offline.Options{}, err
		}
		return offline.Options{Limits: l.response, ReadNamespaces: reads, Schemas: schemas}, nil
	}
	schemas, err := schemacheck.LoadDir(l.crds)
	if err != nil {
		return offline.Options{}, fmt.Errorf("--crds: %w", err)
	}
	return offline.Options{Scopes: protocol.Chain(protocol.Builtin, schemas), Limits: l.response, ReadNamespaces: reads, Schemas: schemas}, nil
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	l.reads.register(fs)
	fs.Uint64Var(&l.fuel, "fuel", 0, fmt.Sprintf("fuel budget of the call, about one unit per executed wasm instruction (default %d; a module's manifest may ask for less, never more)", engine.DefaultFuel))
	fs.DurationVar(&l.timeout, "timeout", 0, fmt.Sprintf("wall-clock limit of the call (default %s; a module's manifest may ask for less, never more)", engine.DefaultTimeout))
	fs.StringVar(&l.memory, "memory-limit", "", "guest memory cap, as a Kubernetes quantity such as 64Mi (default 128Mi; a module's manifest may ask for less, never more)")
	def := ""
	if dir, err := os.UserCacheDir(); err == nil {
		def = filepath.Join(dir, "wasmreconcile", "compiled")
	}
	fs.StringVar(&l.cacheDir, "compilation-cache-dir", def, `directory that keeps compiled modules between runs; "" keeps them in memory only`)
	registerResponseLimits(fs, &l.response)
	l.guest.register(fs)
	l.ceilings.register(fs)
	l.complexity.register(fs)
	fs.StringVar(&l.crds, "crds", "", "directory of CustomResourceDefinition YAML files (several documents to a file allowed; CRDs only): the desired status and children of their kinds are checked against their schemas as the API server checks them, and the children rules learn which of their kinds are cluster-scoped (built-in kinds are always known and checked; a kind of no CRD given is taken as namespaced and not checked)")
}

func (l *limitFlags) limits() (engine.Limits, error) {
	var pages int64
	if l.memory != "" {
		q, err := resource.ParseQuantity(l.memory)
		if err != nil {
			return engine.Limits{}, fmt.Errorf("--memory-limit %q: %w; use a quantity such as 64Mi", l.memory, err)
		}
		if pages = q.Value() / 65536; pages < 1 || pages > 65536 {
			return engine.Limits{}, fmt.Errorf("--memory-limit %s is outside 64Ki..4Gi", l.memory)
		}
	}
	if l.timeout < 0 {
		return engine.Limits{}, fmt.Errorf("--timeout must be positive")
	}
	// Zero fields take the engine's defaults; the manifest may lower them.
	// A one-shot run never idles: IdleModuleTimeout is negative, so
	// nothing is kept on disk for loading a module back.
	limits := engine.Limits{Fuel: l.fuel, Timeout: l.timeout, MemoryLimitPages: uint32(pages), MaxInstances: 1, FreshInstancePerCall: true, IdleModuleTimeout: -1}
	return limits, l.guest.apply(&limits)
}

func (l *limitFlags) load(ctx context.Context, path string) (*engine.Module, func(), error) {
	limits, err := l.limits()
	if err != nil {
		return nil, nil, err
	}
	ceilings, err := l.ceilings.ceilings()
	if err != nil {
		return nil, nil, err
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if l.cacheDir != "" {
		if err := os.MkdirAll(l.cacheDir, 0o755); err != nil {
			l.cacheDir = "" // an unusable cache only costs time
		}
	}
	var compile engine.CompileOptions
	l.complexity.apply(&compile)
	eng, err := engine.New(engine.Options{CompilationCacheDir: l.cacheDir, Ceilings: ceilings, Compile: compile})
	if err != nil {
		return nil, nil, err
	}
	m, err := eng.Load(ctx, filepath.Base(path), wasm, limits)
	if err != nil {
		eng.Close(ctx)
		return nil, nil, err
	}
	// As the operator refuses it at load: a namespaced kind owning a
	// cluster-scoped one (known from the built-in kinds and --crds).
	opts, err := l.options()
	if err == nil {
		err = protocol.CheckOwnership(m.Manifest(), opts.Scopes)
	}
	if err != nil {
		m.Close(ctx)
		eng.Close(ctx)
		return nil, nil, &engine.InvalidModuleError{Module: m.Name(), Reason: "manifest: " + err.Error(), Hint: "fix the module's manifest (docs/abi.md, \"Manifest\")"}
	}
	return m, func() { m.Close(ctx); eng.Close(ctx) }, nil
}

const invokeUsage = `Usage: operator invoke --module M.wasm --object OBJ.yaml [flags]

Runs one reconcile of a module offline, with no cluster, and prints the
response as JSON with fuelConsumed and durationMs, and the guest's log lines
on stderr ("guest: LEVEL: message"). The response is checked by
the same rules as in a cluster (docs/abi.md, "Response rules"). Exits 0 on
success, 1 when the guest reports an error, hits a limit or returns a
response the cluster would refuse (the JSON then has an "error" with a
"kind" and the message the cluster would record), and 2 on bad flags or
unreadable files.

The desired children and status are checked against their schemas with the
API server's own code: built-in kinds always, custom kinds when --crds gives
their CRDs (docs/abi.md, "Schema checks offline"). A field the schema does
not declare, a value of the wrong type or one the CRD's validation refuses
is an InvalidResponse naming the object, the field and the API server's
message.

Flags:
`

func runInvoke(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, invokeUsage); fs.PrintDefaults() }
	var (
		lf                                         limitFlags
		module, object, children, related, cfgFile string
		finalizing                                 bool
	)
	fs.StringVar(&module, "module", "", "the .wasm module (required)")
	fs.StringVar(&object, "object", "", "YAML or JSON file with the object to reconcile (required)")
	fs.StringVar(&children, "children", "", "directory of YAML or JSON files with the observed children")
	fs.StringVar(&related, "related", "", "directory of YAML or JSON files with related objects")
	fs.StringVar(&cfgFile, "config", "", "YAML or JSON file with the module configuration")
	fs.BoolVar(&finalizing, "finalizing", false, "call the module as for an object being deleted")
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2}
	}
	usage := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "operator invoke: "+format+"\n", a...)
		return exitError{2}
	}
	if module == "" || object == "" {
		return usage("--module and --object are required; see operator invoke --help")
	}
	in := offline.Input{Finalizing: finalizing}
	var err error
	if in.Object, err = offline.ReadObject(object); err != nil {
		return usage("--object: %v", err)
	}
	if children != "" {
		if in.Children, err = offline.ReadObjectDir(children); err != nil {
			return usage("--children: %v", err)
		}
	}
	if related != "" {
		if in.Related, err = offline.ReadObjectDir(related); err != nil {
			return usage("--related: %v", err)
		}
	}
	if cfgFile != "" {
		if in.Config, err = offline.ReadConfig(cfgFile); err != nil {
			return usage("--config: %v", err)
		}
	}
	opts, err := lf.options()
	if err != nil {
		return usage("%v", err)
	}
	opts.Log = offline.NewLogger(stderr, "")
	ctx := context.Background()
	m, done, err := lf.load(ctx, module)
	if err != nil {
		if engine.IsInvalidModule(err) {
			printJSON(stdout, map[string]any{"error": map[string]any{"kind": protocol.InvalidModule, "message": err.Error()}, "fuelConsumed": 0})
			return exitError{1}
		}
		return usage("--module: %v", err)
	}
	defer done()
	noteClamped(stderr, m)
	o := offline.Run(ctx, m, in, opts)
	noteUnknownScopes(stderr, o)
	noteUnchecked(stderr, o, map[schema.GroupVersionKind]bool{})
	ms := float64(o.Duration.Microseconds()) / 1000
	out := map[string]any{}
	if o.Response != nil {
		b, _ := json.Marshal(o.Response.Response)
		_ = json.Unmarshal(b, &out)
	}
	out["fuelConsumed"], out["durationMs"] = o.Fuel, ms
	if o.Err != nil {
		e := map[string]any{"kind": o.Kind(), "message": o.Err.Error()}
		if protocol.Terminal(o.Err) {
			e["terminal"] = true
		}
		out["error"] = e
		printJSON(stdout, out)
		return exitError{1}
	}
	printJSON(stdout, out)
	return nil
}

// noteUnchecked says which kinds had no schema to check the status or
// children against, each kind once (seen).
func noteUnchecked(w io.Writer, o offline.Outcome, seen map[schema.GroupVersionKind]bool) {
	for _, gvk := range o.Unchecked {
		if !seen[gvk] {
			seen[gvk] = true
			fmt.Fprintf(w, "note: %s has no schema offline, so its objects were not checked against one; pass its CRD with --crds to check them as the API server will\n", gvk.GroupKind())
		}
	}
}

// noteUnknownScopes says which child kinds were taken as namespaced.
func noteUnknownScopes(w io.Writer, o offline.Outcome) {
	if o.Response == nil {
		return
	}
	for _, gk := range o.Response.ScopeUnknown {
		fmt.Fprintf(w, "note: the scope of %s is unknown offline and was taken as namespaced; pass its CRD with --crds to check it as the cluster will\n", gk)
	}
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

const testUsage = `Usage: operator test [flags] M.wasm CASES_DIR

Runs a module's test cases offline and deterministically: each *.yaml,
*.yml or *.json file in CASES_DIR gives the input a guest observes and what
its response must contain. Prints PASS or FAIL per case with the fuel used
and a diff, then "N passed, N failed"; with -v, also the guest's log lines
of each case on stderr ("CASE: guest: LEVEL: message"). Exits 1 if any case
fails, 2 on bad flags or unreadable files.

A case file (every field optional but input.object; an unknown key is an
error at its file:line:column):

  name: a new Backup waits for its claim   # default: the file name
  input:
    object: {apiVersion: ..., kind: ..., metadata: {...}, spec: {...}}
    children: [...]        # observed children, of the owned kinds
    related: [...]         # objects that serve guest.Get and guest.List
    finalizing: false      # as for an object being deleted
    config: {...}          # the module's configuration
    attempt: 0             # consecutive failures so far
    now: "2026-01-01T00:00:00Z"   # default 2000-01-01T00:00:00Z
    childFailures: [...]   # children the host could not write last time
  expect:
    status: {...}          # a subset of the response's status
    children: [...]        # every desired child, each a subset, matched by
                           # apiVersion, kind and name; [] requires none
    keepChildren: true     # no children field: the children left alone
    events: [{type: Normal, reason: Created, messageContains: "..."}]
    requeueAfterSeconds: 30
    finalized: true
    error: {kind: ReconcileFailed, terminal: true, messageContains: "..."}
    maxFuel: 5000000       # fail when the call uses more
    fuel: 400890           # exactly this fuel; the case then runs on a
                           # fresh instance, where fuel is deterministic
  recorded: {...}          # what production returned (operator record);
                           # not checked here: operator replay reads it

error.kind is an outcome kind of docs/abi.md ("Outcomes"); without
expect.error, any error fails the case. docs/authoring.md has more.

Schema checks: each case's desired children and status are checked against
their schemas with the API server's own code, as server-side apply and the
CRD's validation check them in a cluster: built-in kinds always (client-go's
schemas), custom kinds when --crds DIR gives their CRDs (YAML files of
CustomResourceDefinitions only, several documents to a file allowed). A
typo'd field, a value of the wrong type, or one the CRD's OpenAPI validation
or CEL rules refuse fails the case with kind InvalidResponse and a message
naming the object (Kind namespace/name), the field path and the API
server's message, e.g.

  the API server would refuse child CronJob default/backup: failed to
  create typed patch object (default/backup; batch/v1, Kind=CronJob):
  .spec.jobTemplate.spec.template.spec.serviceAccount_Name: field not
  declared in schema

A case that expects it names it as error: {kind: InvalidResponse}. A kind
with no schema (its CRD not given) is not checked; a note on stderr says so
once. Each case's input objects are checked the same way: a field the
schema does not declare (spec.mesage) never reaches a module in a cluster,
so the case fails, unless it says why with invalidInput: REASON.

Built-in kinds' value rules (an Ingress host in lower case, a port's range,
a required image) live in the kube-apiserver. --api-server checks them too:
it starts etcd and kube-apiserver once for the run (from the cache make
controlplane fills, with the CRDs of --crds), creates each case's input
object there (whole, as the API server stores it; the observed children
and related objects may stay partial), and server-side applies each
desired child and the status with dryRun=All as the host applies them; a
write it refuses fails the case with kind InvalidResponse and the API
server's message. The first line of
the output says which checks ran (docs/abi.md, "Schema checks offline").

Flags:
`

func runTest(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, testUsage); fs.PrintDefaults() }
	var (
		lf        limitFlags
		junit     string
		verbose   bool
		apiServer bool
		assets    string
	)
	fs.StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	fs.BoolVar(&apiServer, "api-server", false, "also check every case against a real kube-apiserver with server-side dry-run: a local control plane (etcd and kube-apiserver from the cache make controlplane fills) started once for the run, with the CRDs of --crds; built-in kinds' value rules and defaulting then apply exactly (about 5 s to start)")
	fs.StringVar(&assets, "assets", "", "with --api-server: directory of etcd and kube-apiserver (default: $KUBEBUILDER_ASSETS, else "+controlplane.CacheAssets()+")")
	fs.BoolVar(&verbose, "v", false, "print the guest's log lines of each case on stderr")
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return exitError{2}
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "operator test: want a module and a cases directory; see operator test --help")
		return exitError{2}
	}
	module, dir := fs.Arg(0), fs.Arg(1)
	cases, err := modtest.LoadDir(dir)
	if err != nil {
		fmt.Fprintln(stderr, "operator test:", err)
		return exitError{2}
	}
	opts, err := lf.options()
	if err != nil {
		fmt.Fprintln(stderr, "operator test:", err)
		return exitError{2}
	}
	ctx := context.Background()
	m, done, err := lf.load(ctx, module)
	if err != nil {
		fmt.Fprintln(stderr, "operator test:", err)
		return exitError{2}
	}
	defer done()
	noteClamped(stderr, m)
	var server *servercheck.Checker
	if apiServer {
		cp, err := startCheckServer(ctx, assets, lf.crds, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "operator test: --api-server:", err)
			return exitError{2}
		}
		defer cp.Stop()
		if server, err = servercheck.New(cp.RESTConfig()); err != nil {
			fmt.Fprintln(stderr, "operator test: --api-server:", err)
			return exitError{2}
		}
	}
	fmt.Fprintln(stdout, checksLine(lf.crds, apiServer))
	var results []modtest.Result
	passed := 0
	unchecked := map[schema.GroupVersionKind]bool{}
	for _, c := range cases {
		if verbose {
			opts.Log = offline.NewLogger(stderr, c.Name+": ")
		}
		caseOpts := opts
		caseOpts.Fresh = c.Expect.Fuel > 0 // exact fuel holds on a fresh instance
		o := offline.Run(ctx, m, c.Input, caseOpts)
		noteUnknownScopes(stderr, o)
		noteUnchecked(stderr, o, unchecked)
		inputDiff, refused := checkInput(opts.Schemas, c, server == nil)
		if server != nil {
			d, err := serverCheck(ctx, server, m.Name(), c, &o, refused > 0)
			if err != nil {
				fmt.Fprintf(stderr, "operator test: case %q: --api-server: %v\n", c.Name, err)
				return exitError{2}
			}
			inputDiff = append(inputDiff, d...)
		}
		r := modtest.Result{Case: c, Outcome: o, Diff: append(inputDiff, c.Check(o)...)}
		results = append(results, r)
		verdict := "FAIL"
		if r.Passed() {
			verdict = "PASS"
			passed++
		}
		fmt.Fprintf(stdout, "%s  %s  (fuel %d, %s)\n", verdict, c.Name, o.Fuel, o.Duration.Round(10*time.Microsecond))
		for _, d := range r.Diff {
			fmt.Fprintf(stdout, "      %s\n", d)
		}
		for _, n := range c.Notes(o) {
			fmt.Fprintf(stdout, "      note: %s\n", n)
		}
	}
	if junit != "" {
		f, err := os.Create(junit)
		if err == nil {
			err = modtest.WriteJUnit(f, m.Name(), results)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "operator test: writing --junit:", err)
			return exitError{2}
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, len(results)-passed)
	if passed != len(results) {
		return exitError{1}
	}
	return nil
}

// inputChecker checks a case's input objects as the API server checks
// them (*schemacheck.Checker).
type inputChecker interface {
	CheckInput(obj map[string]any, what string) (*schemacheck.Refusal, bool)
	Plural(gk schema.GroupKind) (string, bool)
}

// checkInput returns what the API server would refuse in the input of a
// case: the object (its spec, which the module reads, among the rest), the
// children and the related objects, checked against their schemas (the
// CRDs of --crds, and the built-in kinds). A field the schema does not
// declare never reaches the module in a cluster, where the API server
// prunes it, so a case that sets one tests what cannot happen. A case
// with invalidInput set must have an input the API server refuses: when
// the check is the last word (no --api-server, strict; and a custom kind,
// whose CRD's validation runs here whole), its reason is checked to hold.
// refused counts the input objects the check refused, whether or not the
// case expects it.
func checkInput(schemas offline.SchemaChecker, tc modtest.Case, lastWord bool) (diff []string, refused int) {
	c, ok := schemas.(inputChecker)
	if !ok {
		return nil, 0
	}
	in := tc.Input
	checked := 0
	check := func(obj map[string]any, what string) {
		r, ok := c.CheckInput(obj, what)
		gvk := (&unstructured.Unstructured{Object: obj}).GroupVersionKind()
		if _, custom := c.Plural(gvk.GroupKind()); ok && custom {
			checked++
		}
		if r == nil {
			return
		}
		refused++
		if tc.InvalidInput == "" {
			diff = append(diff, fmt.Sprintf("%s: the API server would refuse it, so a cluster never gives it to the module: %s; fix the case, declare the field in the kind's types (make manifests writes the CRD), or set invalidInput with the reason the case needs it", r.What, r.Message))
		}
	}
	check(in.Object, "input.object")
	for i, o := range in.Children {
		check(o, fmt.Sprintf("input.children[%d]", i))
	}
	for i, o := range in.Related {
		check(o, fmt.Sprintf("input.related[%d]", i))
	}
	if lastWord && tc.InvalidInput != "" && refused == 0 && checked > 0 {
		diff = append(diff, "invalidInput is set ("+tc.InvalidInput+"), but the API server would accept every input object: remove it, or make the input what it says")
	}
	return diff, refused
}

// checksLine says which checks operator test runs.
func checksLine(crds string, apiServer bool) string {
	schemas := "built-in kinds"
	if crds != "" {
		schemas += " and the CRDs of " + crds
	}
	server := "not run (--api-server checks built-in kinds' value rules and defaulting too)"
	if apiServer {
		server = "kube-apiserver " + controlplane.KubernetesVersion + ", local, server-side dry-run"
	}
	return "checks: response rules; schemas offline (" + schemas + ", input and response); API server: " + server
}

// startCheckServer starts the control plane of --api-server: etcd and
// kube-apiserver, no controllers, with the CRDs of crds.
func startCheckServer(ctx context.Context, assets, crds string, stderr io.Writer) (*controlplane.ControlPlane, error) {
	opts := controlplane.Options{
		Assets: assets, NoControllerManager: true,
		Progress: func(line string) { fmt.Fprintln(stderr, "--api-server:", line) },
	}
	if crds != "" {
		opts.CRDDirs = []string{crds}
	}
	return controlplane.Start(ctx, opts)
}

// serverCheck checks case c, whose outcome is o, against the API server:
// refusals of its input are returned as diff lines (unless the case says
// its input is invalid on purpose), and refusals of the writes the
// response asks for make o fail as the cluster fails it, with kind
// InvalidResponse and the API server's message, unless the offline
// schema check failed it already.
func serverCheck(ctx context.Context, server *servercheck.Checker, module string, c modtest.Case, o *offline.Outcome, refusedOffline bool) ([]string, error) {
	res, err := server.Check(ctx, module, servercheck.Input{Object: c.Input.Object}, o.Response)
	if err != nil {
		return nil, err
	}
	var diff []string
	switch {
	case c.InvalidInput == "":
		for _, r := range res.Input {
			diff = append(diff, fmt.Sprintf("%s: the API server refused it, so a cluster never gives it to the module: %s; fix the case, or set invalidInput with the reason the case needs it", r.What, r.Message))
		}
	case len(res.Input) == 0 && !refusedOffline:
		diff = append(diff, "invalidInput is set ("+c.InvalidInput+"), but the API server accepted every input object: remove it, or make the input what it says")
	}
	var already *schemacheck.Error
	if len(res.Writes) > 0 && !errors.As(o.Err, &already) {
		e := &schemacheck.Error{Module: module, Call: protocol.CallName(c.Input.Object)}
		for _, r := range res.Writes {
			e.Refusals = append(e.Refusals, schemacheck.Refusal{What: r.What, Message: r.Message})
		}
		o.Err = e
	}
	return diff, nil
}

// noteClamped says on w which limits of m were clamped to the ceilings.
func noteClamped(w io.Writer, m *engine.Module) {
	for _, c := range m.Clamped() {
		fmt.Fprintf(w, "note: %s\n", c)
	}
}

// offlineReadNamespaces is --read-namespaces of invoke and test: the
// cluster's --module-read-namespaces for the module under test.
type offlineReadNamespaces struct{ list string }

func (o *offlineReadNamespaces) register(fs *flag.FlagSet) {
	fs.StringVar(&o.list, "read-namespaces", "", "NS[,NS...]: namespaces beyond the object's own the guest may read through cache_read, as --module-read-namespaces or spec.readNamespaces grant in the cluster (\"*\": every namespace). Default: none")
}
