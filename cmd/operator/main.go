// Command operator runs wasm reconcile modules against a Kubernetes cluster,
// and gives their authors and CI the same engine offline:
//
//	operator run      run modules against a cluster (kubeconfig or in-cluster)
//	operator dev      run modules with hot reload on a local control plane it starts
//	operator invoke   run one reconcile offline and print the response
//	operator test     run a module's test cases offline, for CI
//	operator init     write a new module: go.mod, handler, tests, a case, a CRD, RBAC
//	operator rbac     print the least-privilege RBAC of a module's manifest
//	operator push     push a module to an OCI registry; print its pinned reference
//	operator pull     fetch a module from an OCI registry
//	operator record   fetch a running operator's recorded calls as test cases
//	operator replay   rerun recorded cases on another version and report changes
//	operator version  print the version
//
// A compile worker is this binary started again by the operator
// (engine.SelfCompileWorker); run "operator COMMAND --help" for a command's
// flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	// Mozilla's CA roots, used only where the system has none: the
	// operator image has no CA bundle (internal/image).
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

const usage = `operator runs Kubernetes reconcile logic compiled to WebAssembly.

Usage:
  operator run --module FILE.wasm [--module FILE.wasm ...] [flags]
      Run modules against a cluster (kubeconfig or in-cluster).
  operator dev [--module-dir DIR] [--crds DIR ...] [flags]
      Run modules with hot reload on a local control plane it starts and stops.
  operator invoke --module FILE.wasm --object OBJ.yaml [flags]
      Run one reconcile offline and print the response as JSON.
  operator test [flags] FILE.wasm CASES_DIR
      Run a module's test cases offline; for CI.
  operator init NAME --for GROUP/VERSION/KIND [--owns G/V/K ...] [--reads G/V/K ...] [--dir DIR] [--sdk PATH]
      Write a new module: go.mod, handler, tests, a case, a CRD, a Makefile, RBAC.
  operator generate [--check] PACKAGE_DIR...
      Write the typed decoders of a module's own kind (zz_generated.decode.go).
  operator rbac [--service-account NAMESPACE/NAME] [--namespace NS] [--crds DIR] MODULE.wasm
      Print the least-privilege RBAC of a module's manifest as YAML.
  operator push [--registry-config FILE] MODULE.wasm oci://REGISTRY/REPOSITORY:TAG
      Push a module to an OCI registry (wasm artifact layout); print its pinned reference.
  operator pull [--registry-config FILE] [-o FILE.wasm] oci://REGISTRY/REPOSITORY[:TAG][@DIGEST]
      Fetch a module from an OCI registry; print its pinned reference.
  operator record --endpoint URL --module NAME [--token-file FILE] [--out DIR]
      Fetch a running operator's recorded calls of a module as operator test case files.
  operator replay [flags] CASES_DIR --module NEW.wasm
      Rerun recorded cases on another version and report which calls change, and how.
  operator version

Run "operator COMMAND --help" for the flags of a command.
`

func main() {
	// A compile worker is this binary started again by the operator
	// (engine.SelfCompileWorker): it compiles one module and exits.
	engine.MaybeRunCompileWorker()
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var exit exitError
		if errors.As(err, &exit) {
			os.Exit(exit.code)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage+buildNote)
		return errors.New("missing subcommand")
	}
	switch args[0] {
	case "run":
		return runOperator(args[1:], stderr)
	case "version":
		fmt.Fprintln(stdout, version())
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage+buildNote)
		return nil
	}
	if cmd, ok := toolCommands[args[0]]; ok {
		return cmd(args[1:], stdout, stderr)
	}
	if slices.Contains(toolNames, args[0]) {
		return fmt.Errorf("operator %s: this is the run build of the operator (built with -tags runonly, as the image is), which has only run and version; %s and the other offline commands are in the full build: make operator, or go build ./cmd/operator", args[0], args[0])
	}
	fmt.Fprint(stderr, usage+buildNote)
	return fmt.Errorf("unknown subcommand %q", args[0])
}

// toolNames are the commands besides run and version: the tools of module
// authors and CI. The full build has them all (toolCommands, commands.go);
// the run build, which the image ships, has none, so that the operator in a
// cluster neither links nor initializes their code (CEL, OpenAPI
// validation, the scaffold, the control plane of operator dev): about 36 MB
// less executable and 20 MiB less resident (RATIONALE.md).
var toolNames = []string{"dev", "invoke", "test", "init", "generate", "rbac", "push", "pull", "record", "replay"}

// exitError carries a process exit code; its message, if any, has been
// printed already.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// runWrapper runs operator run's code path in an environment of its own:
// operator dev (dev.go), which starts a control plane first.
type runWrapper interface {
	// register adds the command's flags and usage to run's flag set.
	register(fs *flag.FlagSet)
	// run calls startOperator on the environment's cluster until the
	// command ends.
	run(fs *flag.FlagSet, opts *operator.Options, mo *operator.ManagerOptions, startOperator func(context.Context, *rest.Config) error) error
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runOperator(args []string, stderr io.Writer) error {
	return runOperatorWith(args, stderr, nil)
}

// runOperatorWith is operator run, or with dev operator dev: the same flags
// and code path, on the control plane dev starts (dev.go).
func runOperatorWith(args []string, stderr io.Writer, dev runWrapper) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: operator run [--module FILE.wasm ...] [--module-dir DIR] [--reconcile-modules] [flags]

Runs reconcile modules against a cluster: one controller per module, each
guest call under a fuel budget and a deadline. Modules come from:
  --module FILE.wasm     files loaded at start, or oci:// references
                         (REGISTRY/REPOSITORY@sha256:DIGEST);
  --module-dir DIR       a directory watched for changes: rebuild a module
                         there and it is hot-swapped, no restart;
  --reconcile-modules    ReconcileModule objects (config/crd), each pinned
                         by sha256 and hot-reloaded when its spec changes.
Limits left unset take the host's defaults; a module's manifest may ask for
less, never more. No flag or spec.limits can raise a limit past --max-fuel,
--max-timeout or --max-memory: a value over a ceiling is clamped to it and
reported (a ReconcileModule's LimitsClamped condition and a Warning Event).
Metrics are on --metrics-bind-address, /healthz and /readyz on
--health-probe-bind-address (see docs/metrics.md). Every flag can also be set
in a YAML file passed with --config.

Examples:
  operator run --module bin/modules/widget.wasm            # against $KUBECONFIG
  operator run --module-dir ./build --interpreter-first     # an author's dev loop
  operator run --reconcile-modules --leader-elect           # in-cluster, as deployed

Flags:
`)
		fs.PrintDefaults()
	}
	var (
		opts    operator.Options
		mo      operator.ManagerOptions
		modules stringList
		logs    logFlags
	)
	fs.Var(&modules, "module", "a reconcile module to run (repeatable): a .wasm file, optionally pinned as FILE.wasm@sha256:HEX, or an OCI reference oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST (operator push prints it)")
	fs.StringVar(&opts.Sources.RegistryConfig, "module-registry-config", "", `Docker config file ({"auths": ...}) with the credentials of the registries of oci:// --module references; credential helpers it names are never run (default: anonymous)`)
	fs.BoolVar(&opts.FlightRecorder.Disabled, "no-flight-recorder", false, "keep no record of guest calls (by default the last failed calls of each module and a sample of its successful ones are kept in memory, served to authorized clients at "+operator.FlightRecorderPath+" on the metrics server for operator record)")
	fs.IntVar(&opts.FlightRecorder.Failures, "flight-recorder-failures", operator.DefaultFlightRecorderFailures, "failed calls kept per module by the flight recorder, the last ones")
	fs.IntVar(&opts.FlightRecorder.Successes, "flight-recorder-successes", operator.DefaultFlightRecorderSuccesses, "sampled successful calls kept per module by the flight recorder")
	fs.IntVar(&opts.FlightRecorder.SampleEvery, "flight-recorder-sample-every", operator.DefaultFlightRecorderSampleEvery, "the flight recorder keeps one successful call in this many")
	fs.DurationVar(&opts.FlightRecorder.SampleInterval, "flight-recorder-sample-interval", operator.DefaultFlightRecorderSampleInterval, "the flight recorder keeps at most one sampled successful call per module in this long (each is replayed on a fresh instance; negative: no cap)")
	fs.IntVar(&opts.FlightRecorder.MaxBytes, "flight-recorder-max-bytes", operator.DefaultFlightRecorderMaxBytes, "bytes of records kept per module by the flight recorder")
	fs.IntVar(&opts.FlightRecorder.QueueSize, "flight-recorder-queue", operator.DefaultFlightRecorderQueueSize, "kept calls waiting for the flight recorder's replay on a fresh instance (one worker, off the serving path); more are dropped")
	fs.BoolVar(&opts.FlightRecorder.KeepSecrets, "flight-recorder-keep-secrets", false, "keep Secrets' data in recorded inputs (by default every value is replaced by REDACTED)")
	fs.StringVar(&opts.Sources.CacheDir, "module-cache-dir", "", "directory where oci:// modules (--module and ReconcileModules) are kept by digest once fetched, so that a restart while the registry is down still loads them (default: none, every load fetches)")
	fs.StringVar(&opts.ModuleDir, "module-dir", "", "directory of .wasm modules to run and watch; a changed file is hot-reloaded")
	fs.BoolVar(&opts.FileModulesYield, "file-modules-yield", false, "a module of --module or --module-dir gives way to a ReconcileModule of the same name (which takes it over, with its candidate, canary and promotion) and serves again when that is deleted; false refuses the ReconcileModule with reason NameConflict. operator dev defaults it to true")
	fs.BoolVar(&opts.ReconcileModules, "reconcile-modules", false, "run the modules declared by ReconcileModule objects (needs config/crd installed)")
	fs.BoolVar(&mo.LeaderElection, "leader-elect", false, "elect a leader among replicas with a Lease; only the leader reconciles")
	fs.StringVar(&mo.LeaderElectionID, "leader-election-id", "wasmreconcile-operator", "name of the leader-election Lease")
	fs.StringVar(&mo.LeaderElectionNamespace, "leader-election-namespace", "", `namespace of the Lease (default: the operator's own namespace in-cluster, else "default")`)
	fs.DurationVar(&mo.LeaseDuration, "leader-elect-lease-duration", operator.DefaultLeaseDuration, "how long a Lease lasts without renewal; a crashed leader is replaced after at most this")
	fs.DurationVar(&mo.RenewDeadline, "leader-elect-renew-deadline", operator.DefaultRenewDeadline, "how long the leader keeps trying to renew before it steps down")
	fs.DurationVar(&mo.RetryPeriod, "leader-elect-retry-period", operator.DefaultRetryPeriod, "how often candidates try to acquire or renew the Lease")
	fs.BoolVar(&opts.Sharding.Enabled, "sharding", false, "split module controllers' objects among the replicas by the hash of their namespace (or uid: --shard-key), each replica with a Lease of its own; needs --leader-elect, whose leader alone does module-level work (docs/scaling.md; see --shard-mode)")
	fs.StringVar(&opts.Sharding.Key, "shard-key", "namespace", "with --sharding: what places an object: namespace (an object, its children and its reads land on one replica; a namespace never splits) or uid (objects spread evenly, one large namespace included; runs client-side, every replica caching every object)")
	fs.StringVar(&opts.Sharding.Identity, "shard-identity", "", "this replica's name among the shards (default: $POD_NAME, else the host name)")
	fs.IntVar(&opts.Sharding.Slots, "shard-slots", operator.DefaultShardSlots, "slots the hash of --shard-key is cut into, a power of two up to 4096; the same on every replica")
	fs.StringVar(&opts.Sharding.Mode, "shard-mode", operator.ShardModeAuto, "with --sharding: server-side (each replica lists and watches only its share; needs the API server's ShardedListAndWatch feature gate), client-side (every replica caches every object), or auto (server-side when the API server offers it)")
	fs.DurationVar(&opts.Sharding.Settle, "shard-settle", operator.DefaultShardSettle, "with --sharding: how long a replica that finds no other live replica at start waits for replicas starting with it before it claims every slot (one that finds peers claims its share at once); a negative value: no wait")
	fs.Float64Var(&opts.Sharding.BalanceTolerance, "shard-balance-tolerance", operator.DefaultShardBalanceTolerance, "with --sharding: how far above the mean load (objects of its slots) a replica may hold, as a fraction, before the elected replica moves slots to balance the replicas (a plan aims at half of it); a negative value: make no plans (plans made by other replicas are still followed)")
	fs.DurationVar(&opts.Sharding.BalanceInterval, "shard-balance-interval", operator.DefaultShardBalanceInterval, "with --sharding: how often the elected replica may move slots for load; every replica counts its load every half of it, at the same moments by the wall clock, and the elected replica compares the counts of one moment against --shard-balance-tolerance")
	fs.StringVar(&opts.Sharding.Group, "shard-group", operator.DefaultShardGroup, "label value that groups the replicas' shard Leases (in --leader-election-namespace)")
	fs.BoolVar(&opts.Engine.GuestCodeInMemory, "guest-code-in-memory", false, "keep compiled guest code in anonymous memory instead of mapping it from files in the compilation cache directory, where only the code that runs is resident (default: mapped)")
	fs.BoolVar(&opts.Engine.InterpreterFirst, "interpreter-first", false, "serve new module bytes from wazero's interpreter (loads ~5x faster, runs ~50x slower) until the compiled code is ready")
	fs.IntVar(&opts.Engine.KeepVersions, "keep-versions", operator.DefaultKeepVersions, "versions of each module kept compiled, so a rollback to one is instant")
	fs.Int64Var(&opts.Sources.MaxBytes, "max-module-bytes", operator.DefaultMaxModuleBytes, "largest module, compressed or not, loaded from any source")
	fs.DurationVar(&opts.Sources.DirSettle, "module-dir-settle", operator.DefaultModuleDirSettle, "how long a file in --module-dir must see no write before it is loaded")
	fs.DurationVar(&opts.Sources.FetchTimeout, "module-fetch-timeout", operator.DefaultModuleFetchTimeout, "timeout of fetching a module from a url or oci source")
	fs.DurationVar(&opts.ModuleController.StatusInterval, "module-status-interval", operator.DefaultModuleStatusInterval, "how often a ReconcileModule's status statistics are refreshed")
	fs.IntVar(&opts.ModuleController.LoadWorkers, "module-load-workers", operator.DefaultModuleLoadWorkers, "ReconcileModules reconciled, and so fetched and compiled, at once: one module's slow load never holds up the others'")
	fs.DurationVar(&opts.Health.Interval, "module-health-interval", operator.DefaultHealthInterval, "how often each module's caches are checked for the SyncFailed and CacheStale warnings")
	fs.DurationVar(&opts.Health.QuiescentAfter, "quiescent-after", time.Minute, "how long a converged module must write nothing to be reported quiescent (wasmreconcile_module_state)")
	fs.DurationVar(&opts.Health.SyncTimeout, "module-sync-timeout", operator.DefaultSyncTimeout, "how long a module's kind may take to sync before a SyncFailed Event")
	fs.DurationVar(&opts.Health.StaleAfter, "cache-stale-after", operator.DefaultStaleAfter, "how long a module's kind may see no watch event or list before a CacheStale Event")
	opts.ModuleReadNamespaces = registerModuleReadNamespaces(fs)
	var moduleConfigs stringList
	fs.Var(&moduleConfigs, "module-config", "NAME=FILE: pass the YAML or JSON object in FILE to module NAME as its config (repeatable)")
	fs.Uint64Var(&opts.Policy.Limits.Fuel, "fuel", 0, fmt.Sprintf("fuel budget of one reconcile call, about one unit per executed wasm instruction (default %d; a module's manifest may ask for less, never more)", engine.DefaultFuel))
	fs.DurationVar(&opts.Policy.Limits.Timeout, "timeout", 0, fmt.Sprintf("wall-clock limit of one reconcile call (default %s; a module's manifest may ask for less, never more)", engine.DefaultTimeout))
	var memLimit uint
	fs.UintVar(&memLimit, "memory-limit-pages", 0, fmt.Sprintf("guest memory cap in 64 KiB pages (default %d; a module's manifest may ask for less, never more)", engine.DefaultMemoryLimitPages))
	fs.IntVar(&opts.Policy.Limits.MaxInstances, "max-instances", engine.DefaultMaxInstances, "instances per module, and so concurrent reconciles per module")
	fs.StringVar(&opts.Engine.CompilationCacheDir, "compilation-cache-dir", "", "directory that persists compiled modules and their metered rewrites across restarts; keep it private to the operator (default: in memory)")
	fs.StringVar(&mo.MetricsBindAddress, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint; "0" disables it`)
	fs.StringVar(&mo.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz (failing until the informer caches have synced and while a module waits for a CRD; /readyz/wasmreconcile says which); "0" disables them`)
	fs.StringVar(&mo.PprofBindAddress, "pprof-bind-address", "", `address of net/http/pprof; "" (the default) disables it`)
	fs.Int64Var(&mo.Informers.PageSize, "list-page-size", operator.DefaultListPageSize, "Limit of each LIST page of the informers")
	fs.DurationVar(&mo.Informers.ListTimeout, "list-timeout", operator.DefaultListTimeout, "timeout of each LIST page request")
	var namespaces stringList
	fs.Var(&namespaces, "namespace", "watch only the objects of this namespace (repeatable; default: every namespace); cluster-scoped objects are always watched")
	fs.BoolVar(&mo.Informers.UseWatchList, "use-watch-list", false, "let client-go stream initial lists (WatchList) instead of paginated LISTs")
	fs.DurationVar(&opts.Policy.RateLimit.BaseDelay, "retry-base-delay", policy.DefaultRetryBaseDelay, "first retry delay of a failing object; doubles per failure")
	fs.DurationVar(&opts.Policy.RateLimit.MaxDelay, "retry-max-delay", policy.DefaultRetryMaxDelay, "cap of the per-object retry delay")
	fs.Float64Var(&opts.Policy.RateLimit.QPS, "queue-qps", policy.DefaultQueueQPS, "overall reconcile rate per module (token bucket)")
	fs.IntVar(&opts.Policy.RateLimit.Burst, "queue-burst", policy.DefaultQueueBurst, "token bucket size per module")
	fs.IntVar(&opts.Policy.MaxConcurrentReconciles, "max-concurrent-reconciles", 0, "concurrent reconciles per module (default: --max-instances)")
	fs.IntVar(&opts.Policy.Storm.Threshold, "storm-threshold", policy.DefaultStormThreshold, "unchanged reconciles of one object within --storm-window that make a storm")
	fs.DurationVar(&opts.Policy.Storm.Window, "storm-window", policy.DefaultStormWindow, "window of --storm-threshold")
	fs.DurationVar(&opts.Policy.Storm.Backoff, "storm-backoff", policy.DefaultStormBackoff, "while an object is quiescent, call its guest at most this often until it changes")
	fs.BoolVar(&opts.Policy.Storm.Disabled, "no-storm-damping", false, "never damp reconcile storms")
	fs.IntVar(&opts.Policy.TriggerMaxFanOut, "trigger-max-fanout", policy.DefaultTriggerMaxFanOut, "most objects one event of a related object reconciles through a trigger; the rest are dropped and counted (wasmreconcile_trigger_fanout_dropped_total)")
	fs.BoolVar(&opts.Policy.CallUnchanged, "call-unchanged", false, "call the guest for every event, even one that carries nothing it can react to (such as the host's own status write); by default such events are answered without a call (docs/abi.md)")
	registerResponseLimits(fs, &opts.Policy.Response)
	var guestLimits guestLimitFlags
	guestLimits.register(fs)
	fs.DurationVar(&opts.Policy.Limits.IdleModuleTimeout, "idle-module-timeout", engine.DefaultIdleModuleTimeout, "unload a module that has served no call for this long: its instances, compiled code and decoded module leave memory, and the next event loads it back from the compilation cache without compiling (counted in wasmreconcile_module_unloads_total and wasmreconcile_module_wake_seconds; status.code says Unloaded); 0: the default; negative: never")
	registerEventBudget(fs, &opts.Policy.Events)
	var ceilings ceilingFlags
	ceilings.register(fs)
	var compile compileFlags
	compile.register(fs)
	var identity identityFlags
	identity.register(fs)
	var sources sourceFlags
	sources.register(fs)
	logs.register(fs)
	// --kubeconfig is registered by controller-runtime on flag.CommandLine.
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; defaults to $KUBECONFIG, then in-cluster config, then ~/.kube/config")
	fs.String("config", "", "YAML file of flag values, keyed by flag name (lists for repeatable flags); flags given on the command line override it")
	if dev != nil {
		dev.register(fs)
	}
	if err := applyConfigFile(fs, args); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(modules) == 0 && opts.ModuleDir == "" && !opts.ReconcileModules {
		return errors.New("no modules: pass --module FILE.wasm, --module-dir DIR or --reconcile-modules")
	}
	opts.Modules = modules
	mo.Namespaces = namespaces
	if opts.Sharding.Enabled {
		if !mo.LeaderElection {
			return errors.New("--sharding needs --leader-elect: module-level work (ReconcileModule status, finalizer drains) has one writer, the elected replica")
		}
		if t := opts.Sharding.BalanceTolerance; t == 0 || math.IsNaN(t) || math.IsInf(t, 0) {
			return fmt.Errorf("--shard-balance-tolerance %v: want a fraction above 0 (0.1 for 10%%), or a negative value to make no plans", t)
		}
		if opts.Sharding.BalanceInterval < time.Second {
			return fmt.Errorf("--shard-balance-interval %s: want at least 1s", opts.Sharding.BalanceInterval)
		}
		if opts.Sharding.Identity == "" {
			opts.Sharding.Identity = os.Getenv("POD_NAME")
		}
		if opts.Sharding.Identity == "" {
			host, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("--sharding: no --shard-identity, no $POD_NAME and no host name: %w", err)
			}
			opts.Sharding.Identity = host
		}
		opts.Sharding.LeaseDuration, opts.Sharding.RenewDeadline, opts.Sharding.RetryPeriod = mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod
		if err := opts.Sharding.Validate(); err != nil {
			return shardFlagError(err)
		}
	}
	opts.Policy.Limits.MemoryLimitPages = uint32(memLimit)
	if err := guestLimits.apply(&opts.Policy.Limits); err != nil {
		return err
	}
	var err error
	if opts.Engine.Ceilings, err = ceilings.ceilings(); err != nil {
		return err
	}
	budget, err := compile.apply(&opts)
	if err != nil {
		return err
	}
	if err := identity.apply(&opts); err != nil {
		return err
	}
	if err := sources.apply(&opts); err != nil {
		return err
	}
	for _, mc := range moduleConfigs {
		name, file, ok := strings.Cut(mc, "=")
		if !ok || name == "" || file == "" {
			return fmt.Errorf("--module-config %q: want NAME=FILE", mc)
		}
		cfg, err := offline.ReadConfig(file)
		if err != nil {
			return fmt.Errorf("--module-config %s: %w", name, err)
		}
		if opts.ModuleConfig == nil {
			opts.ModuleConfig = map[string]map[string]any{}
		}
		opts.ModuleConfig[name] = cfg
	}

	logger := logs.logger(stderr)
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	// startOperator runs the operator on cfg until ctx ends.
	startOperator := func(ctx context.Context, cfg *rest.Config) error {
		start := time.Now()
		op, err := operator.New(cfg, mo, opts)
		if err != nil {
			return err
		}
		ctrl.Log.WithName("operator").Info("starting", "modules", len(op.Names()), "failed", len(op.LoadErrors()), "loadTime", time.Since(start).Round(time.Millisecond).String(),
			"memoryBudget", budget)
		return op.Start(ctx)
	}
	if dev != nil {
		return dev.run(fs, &opts, &mo, startOperator)
	}
	if *kubeconfig != "" {
		os.Setenv("KUBECONFIG", *kubeconfig)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w; pass --kubeconfig or set KUBECONFIG", err)
	}
	return startOperator(ctrl.SetupSignalHandler(), cfg)
}

// applyConfigFile sets the flags named in the --config file found in args,
// so that the command line, parsed after, overrides them. A key that is not
// a flag is an error, so that a typo does not go unnoticed.
func applyConfigFile(fs *flag.FlagSet, args []string) error {
	path := ""
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				path = args[i+1]
			}
		case strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-config="):
			path = a[strings.IndexByte(a, '=')+1:]
		}
	}
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		return fmt.Errorf("--config %s: %w; want a YAML map of flag names to values", path, err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "config" || fs.Lookup(k) == nil {
			return fmt.Errorf("--config %s: unknown key %q; keys are the flag names of `operator run --help`", path, k)
		}
		list, isList := values[k].([]any)
		if !isList {
			list = []any{values[k]}
		}
		for _, v := range list {
			text := fmt.Sprint(v)
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				text = strconv.FormatInt(int64(f), 10) // YAML numbers arrive as float64: 5000000, not 5e+06
			}
			if err := fs.Set(k, text); err != nil {
				return fmt.Errorf("--config %s: %s: %w", path, k, err)
			}
		}
	}
	return nil
}

func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "wasmreconcile operator " + v
}

// shardFlags name the flag of each ShardingOptions field main sets.
var shardFlags = map[string]string{
	"Slots": "--shard-slots", "Mode": "--shard-mode", "Key": "--shard-key", "Group": "--shard-group",
	"Identity": "--shard-identity", "BalanceTolerance": "--shard-balance-tolerance", "BalanceInterval": "--shard-balance-interval",
}

// shardFlagError names the flag behind a *operator.ShardingOptionError.
func shardFlagError(err error) error {
	var fe *operator.ShardingOptionError
	if !errors.As(err, &fe) {
		return err
	}
	name := shardFlags[fe.Field]
	if fe.Field == "Identity" {
		name += " (default: $POD_NAME, else the host name)"
	}
	return fmt.Errorf("%s %q: %s", name, fe.Value, fe.Want)
}
