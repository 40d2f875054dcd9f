// Command benche2e is the end-to-end benchmark of issue 13: the operator
// running the widget module against a native controller-runtime controller
// with the same logic and the same status write (hack/benche2e/native), on a
// real kube-apiserver and etcd. It is run by `make bench-e2e`:
//
//	benche2e -assets DIR [-objects 2000,10000] [-workers 4] [-rounds 1] [-modules 20] [-module-objects 100] [-idle-module-timeout 30s] [-active-modules 2]
//
// It builds the operator, the native controller and the widget module once,
// then for each object count runs the two controllers interleaved (native,
// operator, operator, native; -rounds such blocks), each run on a fresh
// control plane: it starts the controller, waits until it is ready, creates
// the Widgets from a few goroutines and measures
//
//   - time to converge: from the first create until every Widget is Ready
//     (seen by a watch);
//   - CPU to converge: the controller's user+system CPU over that time
//     (/proc/PID/stat), and again once its work queues have drained (every
//     workqueue_depth and controller_runtime_active_workers at 0 for 2 s);
//   - idle CPU: over -idle (10 s) after that, from the scheduler's
//     per-thread nanoseconds (/proc/PID/task/TID/schedstat);
//   - RSS: VmRSS 20 s after convergence, or at the end of the idle time
//     when that is later (and VmHWM, the peak);
//
// and prints, per metric, the ratio operator ÷ native with "met" or
// "missed" against the goals of issue 13. The many-module case (-modules N)
// runs N kinds of the Widget's schema: N native processes, one per kind,
// against one operator running N builds of the widget module, one per kind,
// and compares their summed RSS; then, in its idle phase, it keeps changing
// the objects of -active-modules kinds for -idle-module-timeout (the
// operator's) plus 20 s, checks that the operator unloaded every other
// module, and compares the summed RSS again.
//
// The sharding case (-shard-objects N, make bench-shard) is described in
// shard.go.
//
// Every process it starts (control planes, controllers) is stopped when it
// ends, on an error or Ctrl-C too; the control plane and the controllers also
// get SIGKILL if the driver itself is killed.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/client-go/dynamic"
)

// rssAfter is how long after convergence the RSS is read.
const rssAfter = 20 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benche2e: error:", err)
		os.Exit(1)
	}
}

type bench struct {
	assets      string
	repo        string
	work        string
	operatorBin string
	nativeBin   string
	widgetWasm  string
	crdFile     string
	workers     int
	creators    int
	idle        time.Duration
	timeout     time.Duration
	start       time.Time
	out         io.Writer
	// The many-module case's idle phase: the operator unloads modules
	// idle for idleModules; active kinds keep being changed.
	idleModules time.Duration
	active      int
	// heapProfiles: the operator serves pprof, and each run saves its heap
	// profile into the work directory at the end (-heap-profiles).
	heapProfiles bool
	// cpuProfile: the operator serves pprof, and each run profiles its CPU
	// for this long from the first create into the work directory
	// (-cpu-profile); 0: none.
	cpuProfile time.Duration
	// idleProfile: the operator serves pprof, and each run profiles its
	// CPU over the idle window (-idle-cpu-profile); the profiler's own
	// cost then counts in the idle figure.
	idleProfile bool
	// idleTrace: the operator serves pprof, and each run records an
	// execution trace of the idle window instead (-idle-trace), which shows
	// every goroutine that wakes, where a 100 Hz profile may sample none.
	idleTrace bool
	// shardEnv is added to the sharding case's operators' environment
	// (-shard-gomaxprocs).
	shardEnv []string
	// shardAlone: after each sharded run, the sharding case runs one real
	// replica among fake members, as the sharded run balanced them
	// (-shard-alone).
	shardAlone bool
	// pinCPU >= 0: every operator of the sharding case runs on this CPU
	// alone, and the driver, the control plane and the creators on the
	// others (-pin-cpu).
	pinCPU int
	// shardKey is the sharded replicas' --shard-key (-shard-key).
	shardKey string
	// shardWork > 0: the sharding case's widget runs this many rounds of
	// work in each reconcile (-shard-work), built into shardWasm; else
	// shardWasm is the widget of the other cases.
	shardWork int
	shardWasm string
	// shardExisting: the sharding case creates its Widgets while no
	// operator runs and measures the CPU to converge from the operators'
	// start on them (-shard-existing).
	shardExisting bool
}

func run() error {
	var (
		assets        = flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver and etcd (default: $KUBEBUILDER_ASSETS, else the output of hack/controlplane.sh)")
		objects       = flag.String("objects", "2000,10000", `comma-separated object counts of the end-to-end case ("" skips it)`)
		workers       = flag.Int("workers", 4, "concurrent reconciles of each controller (the operator's --max-instances)")
		rounds        = flag.Int("rounds", 1, "blocks of four runs (native, operator, operator, native) per case")
		modules       = flag.Int("modules", 20, "kinds, and modules, of the many-module case (0 skips it)")
		moduleObjects = flag.Int("module-objects", 100, "objects per kind in the many-module case")
		creators      = flag.Int("creators", 4, "goroutines creating the objects")
		idle          = flag.Duration("idle", 10*time.Second, "how long idle CPU is measured after the work queues drained")
		timeout       = flag.Duration("timeout", 20*time.Minute, "longest wait for one run to converge")
		idleModules   = flag.Duration("idle-module-timeout", 30*time.Second, "the operator's --idle-module-timeout in the many-module case, whose idle phase then waits this long plus 20 s before measuring RSS again (0 skips the phase)")
		active        = flag.Int("active-modules", 2, "kinds of the many-module case whose objects keep changing during its idle phase")
		idleProfile   = flag.Bool("idle-cpu-profile", false, "run the operator with --pprof-bind-address and profile its CPU over the idle window of each run, into the work directory (kept); the profiler's own CPU then counts in the idle figure")
		cpuProfile    = flag.Duration("cpu-profile", 0, "run the operator with --pprof-bind-address and profile its CPU for this long from the first create of each run, into the work directory (kept); 0: no profile")
		idleTrace     = flag.Bool("idle-trace", false, "run the operator with --pprof-bind-address and record an execution trace of its idle window in each run, into the work directory (kept; go tool trace reads it); the tracer's own CPU then counts in the idle figure")
		heapProfiles  = flag.Bool("heap-profiles", false, "run the operator with --pprof-bind-address and save its heap profile at the end of each run into the work directory (kept)")
		shardObjects  = flag.Int("shard-objects", 0, "Widgets of the sharding case (make bench-shard: 30000); 0 skips it")
		shardNS       = flag.Int("shard-namespaces", 300, "namespaces the sharding case spreads its Widgets over")
		shardReplicas = flag.Int("shard-replicas", 3, "sharded replicas of the sharding case, against one operator without sharding")
		shardProcs    = flag.Int("shard-gomaxprocs", 0, "GOMAXPROCS of every operator of the sharding case, the single one too (0: the Go default, the machine's cores)")
		shardAlone    = flag.Bool("shard-alone", false, "after each sharded run, run each replica once more alone, the one that held the most Widgets once balanced first: one real sharded replica with its identity, the other members being Leases the driver renews that carry the plan the replicas made, to measure each balanced replica's share without other operator processes beside it, as on a node of its own (server-side mode; no joins or leaves)")
		pinCPU        = flag.Int("pin-cpu", -1, "run every operator of the sharding case on this CPU alone (with taskset; the Go runtime then sizes GOMAXPROCS to 1), and the driver, the control plane and the creators on the other CPUs, so that no other process shares the operators' core and its caches, as on a node of their own; with -shard-alone, the single operator and each replica alone have the core to themselves (-1: no pinning)")
		shardModes    = flag.String("shard-modes", "server-side,client-side", "modes of the sharding case, each on control planes with ShardedListAndWatch on (server-side) or off (client-side)")
		shardWork     = flag.Int("shard-work", 0, "rounds of a 64-bit hash the sharding case's widget runs in each reconcile (built with -ldflags \"-X main.Work=N\"), to measure a module whose reconcile costs CPU; 100000 rounds are ~0.96 million fuel, ~0.2 ms of CPU here (0: the example widget as it is)")
		shardKey      = flag.String("shard-key", "namespace", "the sharded replicas' --shard-key: namespace, or uid (which runs client-side only: use -shard-modes client-side)")
		shardExisting = flag.Bool("shard-existing", false, "in the sharding case, create the Widgets while no operator runs (each started once before, so that its compilation cache holds the module, as a restarted container's emptyDir does), then start the operators at once and measure each one's CPU from its start until every Widget is Ready: converging on objects that exist, as when a module rolls out over a cluster's objects, every event dense; with -shard-alone, each replica alone is measured the same way (its informers count its share once listed)")
		createRate    = flag.Float64("create-rate", 0, "objects created a second at most, by all the creators together (0: as fast as they go)")
		operatorBin   = flag.String("operator", "", "a prebuilt operator binary (default: build ./cmd/operator)")
		workDir       = flag.String("work", "", "directory for the builds and the controllers' logs (default: a temporary directory, removed at the end unless a run failed)")
	)
	flag.Parse()
	counts, err := parseCounts(*objects)
	if err != nil {
		return err
	}
	if *rounds < 1 || *workers < 1 || *creators < 1 || *modules < 0 || *moduleObjects < 1 {
		return errors.New("-rounds, -workers, -creators and -module-objects must be at least 1, -modules at least 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *active < 0 || (*modules > 0 && *active > *modules) || *idleModules < 0 {
		return errors.New("-active-modules must be within 0..-modules, and -idle-module-timeout not negative")
	}
	if *createRate < 0 {
		return errors.New("-create-rate must not be negative")
	}
	if *createRate > 0 {
		createLimit = rate.NewLimiter(rate.Limit(*createRate), 1)
	}
	if *pinCPU >= 0 && *shardObjects == 0 {
		return errors.New("-pin-cpu pins the sharding case's operators: give -shard-objects too")
	}
	if *shardWork < 0 || (*shardWork > 0 && *shardObjects == 0) {
		return errors.New("-shard-work is a number of rounds, for the sharding case: give -shard-objects too")
	}
	b := &bench{repo: ".", pinCPU: -1, shardWork: *shardWork, workers: *workers, creators: *creators, idle: *idle, timeout: *timeout, start: time.Now(), out: os.Stdout,
		idleModules: *idleModules, active: *active, heapProfiles: *heapProfiles, cpuProfile: *cpuProfile, idleProfile: *idleProfile, idleTrace: *idleTrace}
	if _, err := os.Stat(filepath.Join(b.repo, "cmd", "operator")); err != nil {
		return fmt.Errorf("run benche2e from the repository's root (make bench-e2e does): %w", err)
	}
	b.crdFile = filepath.Join(b.repo, "examples", "crds", "widgets.examples.wasmreconcile.io.yaml")
	if b.assets = *assets; b.assets == "" {
		out, err := exec.CommandContext(ctx, "bash", filepath.Join(b.repo, "hack", "controlplane.sh")).Output()
		if err != nil {
			return fmt.Errorf("hack/controlplane.sh: %w", err)
		}
		b.assets = strings.TrimSpace(string(out))
	}
	keep := *workDir != "" || *heapProfiles || *cpuProfile > 0 || *idleProfile || *idleTrace
	if b.work = *workDir; b.work == "" {
		if b.work, err = os.MkdirTemp("", "wasmreconcile-benche2e-work-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(b.work, 0o755); err != nil {
		return err
	}
	failed := true
	defer func() {
		if keep || failed {
			fmt.Fprintf(b.out, "builds and logs kept in %s\n", b.work)
			return
		}
		os.RemoveAll(b.work)
	}()

	b.printMachine(ctx)
	var kinds []kind
	for i := 1; i <= *modules; i++ {
		kinds = append(kinds, benchKind(i))
	}
	if err := b.build(ctx, *operatorBin, kinds); err != nil {
		return err
	}

	var reports []string
	for _, n := range counts {
		title := fmt.Sprintf("%s Widgets, %d workers", thousands(n), b.workers)
		runs, err := b.interleaved(ctx, *rounds, title, []kind{exampleWidget}, n)
		if err != nil {
			return err
		}
		reports = append(reports, b.reportE2E(title, runs))
		fmt.Fprint(b.out, reports[len(reports)-1])
	}
	if *shardObjects > 0 {
		if *shardNS < 2 || *shardReplicas < 2 {
			return errors.New("-shard-namespaces and -shard-replicas must be at least 2")
		}
		spread = *shardNS
		b.shardAlone, b.shardExisting = *shardAlone, *shardExisting
		if b.pinCPU = *pinCPU; b.pinCPU >= 0 {
			if err := pinDriver(b.pinCPU); err != nil {
				return err
			}
		}
		switch b.shardKey = *shardKey; b.shardKey {
		case "namespace":
		case "uid":
			if *shardModes != "client-side" || b.shardAlone {
				return errors.New("-shard-key uid runs client-side only (every replica caches every object): give -shard-modes client-side, without -shard-alone")
			}
		default:
			return fmt.Errorf("-shard-key %q: want namespace or uid", *shardKey)
		}
		if *shardProcs > 0 {
			b.shardEnv = []string{fmt.Sprintf("GOMAXPROCS=%d", *shardProcs)}
		}
		for _, mode := range strings.Split(*shardModes, ",") {
			if mode != "server-side" && mode != "client-side" {
				return fmt.Errorf("-shard-modes: %q is neither server-side nor client-side", mode)
			}
			report, err := b.shardCase(ctx, mode == "server-side", *rounds, *shardObjects, *shardReplicas)
			if err != nil {
				return err
			}
			reports = append(reports, report)
			fmt.Fprint(b.out, report)
		}
		spread = 1
	}
	if len(kinds) > 0 {
		title := fmt.Sprintf("%d modules, %s objects of each kind (%s in all), %d workers each", len(kinds), thousands(*moduleObjects), thousands(len(kinds)**moduleObjects), b.workers)
		runs, err := b.interleaved(ctx, *rounds, title, kinds, *moduleObjects)
		if err != nil {
			return err
		}
		reports = append(reports, b.reportModules(title, len(kinds), runs))
		fmt.Fprint(b.out, reports[len(reports)-1])
	}
	fmt.Fprintf(b.out, "\n== summary (%s in all; load average at the end: %s)\n", time.Since(b.start).Round(time.Second), loadavg())
	for _, r := range reports {
		fmt.Fprint(b.out, r)
	}
	failed = false
	return nil
}

// say prints a progress line.
func (b *bench) say(format string, args ...any) {
	fmt.Fprintf(b.out, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// printMachine prints what the numbers were measured on.
func (b *bench) printMachine(ctx context.Context) {
	model := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(info), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if info, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(info), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				if f := strings.Fields(line); len(f) >= 2 {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	commit := "unknown commit"
	if out, err := exec.CommandContext(ctx, "git", "-C", b.repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "-C", b.repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	fmt.Fprintf(b.out, "benche2e: %d CPUs (%s)%s, %s, %s; repository at %s; load average %s\n",
		runtime.NumCPU(), model, mem, runtime.GOOS, runtime.Version(), commit, loadavg())
	fmt.Fprintf(b.out, "control plane from %s; each run on a fresh kube-apiserver and etcd\n", b.assets)
}

// build builds the operator (unless operatorBin is given), the native
// controller, the widget module, and one build of the widget module for
// each of kinds.
func (b *bench) build(ctx context.Context, operatorBin string, kinds []kind) error {
	gobuild := func(dir string, env []string, args ...string) error {
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	if operatorBin != "" {
		b.operatorBin = operatorBin
		b.say("operator: %s (prebuilt)", operatorBin)
	} else {
		b.operatorBin = filepath.Join(b.work, "operator")
		// The run build, as the image ships it (make image): the offline
		// commands' code is neither linked nor initialized.
		b.say("building the operator (./cmd/operator, -tags runonly as the image)")
		if err := gobuild(b.repo, []string{"CGO_ENABLED=0"}, "-tags", "runonly", "-o", b.operatorBin, "./cmd/operator"); err != nil {
			return err
		}
	}
	b.nativeBin = filepath.Join(b.work, "native")
	b.say("building the native controller (./hack/benche2e/native)")
	if err := gobuild(b.repo, nil, "-o", b.nativeBin, "./hack/benche2e/native"); err != nil {
		return err
	}
	wasm := []string{"GOOS=wasip1", "GOARCH=wasm"}
	modules := filepath.Join(b.repo, "modules")
	b.widgetWasm = filepath.Join(b.work, "widget.wasm")
	exampleWidget.Wasm = b.widgetWasm
	b.say("building the widget module (modules/widget), as make modules does")
	if err := gobuild(modules, wasm, "-buildmode=c-shared", "-o", b.widgetWasm, "./widget"); err != nil {
		return err
	}
	b.shardWasm = b.widgetWasm
	if b.shardWork > 0 {
		b.shardWasm = filepath.Join(b.work, "widget-work.wasm")
		work := strconv.Itoa(b.shardWork)
		b.say("building the widget module with %s rounds of work per reconcile, for the sharding case", work)
		if err := gobuild(modules, wasm, "-buildmode=c-shared", "-ldflags", "-X main.Work="+work, "-o", b.shardWasm, "./widget"); err != nil {
			return err
		}
		if err := holdsString(b.shardWasm, work, "main.Work="+work); err != nil {
			return fmt.Errorf("%w: modules/widget has no main.Work to set with -ldflags -X", err)
		}
	}
	for i := range kinds {
		k := &kinds[i]
		k.Wasm = filepath.Join(b.work, k.Module+".wasm")
		if i == 0 || (i+1)%5 == 0 {
			b.say("building the widget module for kind %d of %d (%s.%s)", i+1, len(kinds), k.Kind, k.Group)
		}
		ldflags := fmt.Sprintf("-X main.Name=%s -X main.Group=%s -X main.Kind=%s", k.Module, k.Group, k.Kind)
		if err := gobuild(modules, wasm, "-buildmode=c-shared", "-ldflags", ldflags, "-o", k.Wasm, "./widget"); err != nil {
			return err
		}
		if err := holdsString(k.Wasm, k.Group, "main.Group="+k.Group); err != nil {
			return fmt.Errorf("%w: modules/widget has no main.Name, main.Group and main.Kind to set with -ldflags -X", err)
		}
	}
	return nil
}

// holdsString checks that the module at path holds s more often than the
// -ldflags recorded in its build information (flag) do: the linker ignores
// -X for a variable that does not exist, so a build that set one holds its
// value as a string of its own besides.
func holdsString(path, s, flag string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Count(data, []byte(s)) <= bytes.Count(data, []byte(flag)) {
		return fmt.Errorf("%s does not hold %q", path, s)
	}
	return nil
}

// interleaved runs the case rounds times in blocks of native, operator,
// operator, native.
func (b *bench) interleaved(ctx context.Context, rounds int, title string, kinds []kind, perKind int) ([]result, error) {
	order := []string{"native", "operator", "operator", "native"}
	var runs []result
	for r := range rounds {
		for i, v := range order {
			label := fmt.Sprintf("%s: run %d of %d (%s)", title, r*len(order)+i+1, rounds*len(order), v)
			res, err := b.runOnce(ctx, label, v, kinds, perKind)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", label, err)
			}
			runs = append(runs, res)
		}
	}
	return runs, nil
}

// result is what one run measured. CPU times and memory are summed over
// the run's controller processes (one operator, or one native controller
// per kind).
type result struct {
	variant    string
	procs      int
	startup    time.Duration // CPU from the start until ready (informational)
	create     time.Duration // wall time of the creates
	converge   time.Duration // first create → every object Ready
	cpuConv    time.Duration // CPU over converge
	drain      time.Duration // convergence → work queues drained
	cpuDrain   time.Duration // CPU from the first create until drained
	cpuIdle    time.Duration // CPU over the idle time after draining
	rss, hwm   int64         // VmRSS at the end, VmHWM
	reconciles float64       // controller_runtime_reconcile_total
	cpConv     time.Duration // the control plane's CPU over converge
	load       string        // load average when the run started
	// The many-module case's idle phase: summed VmRSS at its end, and the
	// operator's modules still loaded then.
	rssIdleModules int64
	loadedModules  int
}

// runOnce runs one variant ("native" or "operator") on a fresh control
// plane with perKind objects of each of kinds.
func (b *bench) runOnce(ctx context.Context, label, variant string, kinds []kind, perKind int) (res result, err error) {
	res = result{variant: variant, load: loadavg()}
	b.say("%s: starting a control plane (load average %s)", label, res.load)
	crds, err := crdsFor(b.crdFile, kinds)
	if err != nil {
		return res, err
	}
	cp, err := startControlPlane(b.assets, crds)
	if err != nil {
		return res, err
	}
	defer cp.stop()
	if err := createNamespace(ctx, cp.config); err != nil {
		return res, err
	}
	var pprofAddr string // the operator's, when it serves pprof
	runDir, err := os.MkdirTemp(b.work, "run-"+variant+"-")
	if err != nil {
		return res, err
	}

	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	if variant == "native" {
		for _, k := range kinds {
			p, err := startProc("native "+k.Kind, b.nativeBin, func(metrics, probe string) []string {
				return []string{"--kubeconfig", cp.Kubeconfig(), "--group", k.Group, "--kind", k.Kind, "--name", k.Module,
					"--workers", strconv.Itoa(b.workers), "--metrics-bind-address", metrics, "--health-probe-bind-address", probe}
			}, filepath.Join(runDir, "native-"+k.Module+".log"))
			if err != nil {
				return res, err
			}
			procs = append(procs, p)
		}
	} else {
		pprofAddr, err = freeAddr()
		if err != nil {
			return res, err
		}
		defer func() {
			if b.heapProfiles && err == nil {
				err = saveHeapProfile(pprofAddr, filepath.Join(runDir, "operator-heap.pprof"))
				b.say("%s: heap profile in %s", label, filepath.Join(runDir, "operator-heap.pprof"))
			}
		}()
		p, err := startProc("operator", b.operatorBin, func(metrics, probe string) []string {
			args := []string{"run", "--kubeconfig", cp.Kubeconfig(), "--max-instances", strconv.Itoa(b.workers),
				"--metrics-bind-address", metrics, "--health-probe-bind-address", probe}
			if b.idlePhase(kinds) {
				args = append(args, "--idle-module-timeout", b.idleModules.String())
			}
			if b.heapProfiles || b.cpuProfile > 0 || b.idleProfile || b.idleTrace {
				args = append(args, "--pprof-bind-address", pprofAddr)
			}
			for _, k := range kinds {
				args = append(args, "--module", k.Wasm)
			}
			return args
		}, filepath.Join(runDir, "operator.log"))
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	res.procs = len(procs)
	b.say("%s: waiting for %d %s process(es) to be ready", label, len(procs), variant)
	for _, p := range procs {
		if err := p.waitReady(ctx, 5*time.Minute); err != nil {
			return res, err
		}
	}
	cpu := func() time.Duration {
		var total time.Duration
		for _, p := range procs {
			if c, err := cpuTime(p.pid()); err == nil {
				total += c
			}
		}
		return total
	}
	if err := sleep(ctx, 2*time.Second); err != nil { // let start-up work settle
		return res, err
	}

	dyn, err := dynamic.NewForConfig(cp.config)
	if err != nil {
		return res, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ready := newReadiness()
	for _, k := range kinds {
		if err := watchReadiness(watchCtx, dyn, k, ready); err != nil {
			return res, err
		}
	}
	total := int64(len(kinds) * perKind)
	cpu0, cp0 := cpu(), cp.cpu()
	res.startup = cpu0
	b.say("%s: ready (start-up CPU %.2fs); creating %s objects", label, cpu0.Seconds(), thousands(int(total)))
	t0 := time.Now()
	if variant == "operator" && b.cpuProfile > 0 {
		profiled := make(chan error, 1)
		path := filepath.Join(runDir, "operator-cpu.pprof")
		go func() { profiled <- saveCPUProfile(pprofAddr, b.cpuProfile, path) }()
		defer func() {
			if perr := <-profiled; perr != nil && err == nil {
				err = perr
			}
			b.say("%s: CPU profile of the first %s in %s", label, b.cpuProfile, path)
		}()
	}
	created := make(chan error, 1)
	go func() {
		err := createWidgets(ctx, dyn, kinds, perKind, b.creators)
		res.create = time.Since(t0)
		created <- err
	}()
	if created, err = b.waitConverged(ctx, label, ready, total, t0, created, procs); err != nil {
		return res, err
	}
	res.converge = time.Since(t0)
	res.cpuConv, res.cpConv = cpu()-cpu0, cp.cpu()-cp0
	tConv := time.Now()
	if created != nil {
		if err := <-created; err != nil {
			return res, err
		}
	}
	b.say("%s: all %s Ready after %s (CPU %.2fs; control plane %.2fs); waiting for the work queues to drain",
		label, thousands(int(total)), res.converge.Round(time.Millisecond), res.cpuConv.Seconds(), res.cpConv.Seconds())
	b.say("%s: %s", label, describe(ctx, dyn, kinds[0]))

	// Drained: every queue empty and no worker busy, in every process,
	// for 2 s; the CPU counted is the CPU at the first of those scrapes.
	var idleSince time.Time
	var cpuAtIdle time.Duration
	for {
		busy := false
		for _, p := range procs {
			m, err := p.scrape("workqueue_depth", "controller_runtime_active_workers")
			if err != nil {
				if e := p.exited(); e != nil {
					return res, e
				}
				return res, fmt.Errorf("scraping %s: %w", p.name, err)
			}
			if m["workqueue_depth"] != 0 || m["controller_runtime_active_workers"] != 0 {
				busy = true
			}
		}
		now := time.Now()
		if busy {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince, cpuAtIdle = now, cpu()
		} else if now.Sub(idleSince) >= 2*time.Second {
			break
		}
		if now.Sub(tConv) > b.timeout {
			return res, fmt.Errorf("work queues not drained %s after convergence", b.timeout)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.drain = idleSince.Sub(tConv)
	if res.drain < 0 {
		res.drain = 0
	}
	res.cpuDrain = cpuAtIdle - cpu0
	b.say("%s: drained %s after convergence (CPU from the first create %.2fs); measuring idle CPU for %s",
		label, res.drain.Round(100*time.Millisecond), res.cpuDrain.Seconds(), b.idle)
	idle0 := make([]map[int]time.Duration, len(procs))
	for i, p := range procs {
		if idle0[i], err = threadCPU(p.pid()); err != nil {
			return res, err
		}
	}
	if variant == "operator" && b.idleProfile {
		path := filepath.Join(runDir, "operator-idle-cpu.pprof")
		if err := saveCPUProfile(pprofAddr, b.idle, path); err != nil {
			return res, err
		}
		b.say("%s: CPU profile of the idle window in %s", label, path)
	} else if variant == "operator" && b.idleTrace {
		path := filepath.Join(runDir, "operator-idle.trace")
		if err := saveTrace(pprofAddr, b.idle, path); err != nil {
			return res, err
		}
		b.say("%s: execution trace of the idle window in %s", label, path)
	} else if err := sleep(ctx, b.idle); err != nil {
		return res, err
	}
	for i, p := range procs {
		d, err := threadCPUSince(p.pid(), idle0[i])
		if err != nil {
			return res, err
		}
		res.cpuIdle += d
	}
	// RSS is read 20 s after convergence (issue 26's definition), or at the
	// end of the idle CPU window when that is later.
	if wait := time.Until(tConv.Add(rssAfter)); wait > 0 {
		if err := sleep(ctx, wait); err != nil {
			return res, err
		}
	}
	for _, p := range procs {
		rss, hwm, err := memory(p.pid())
		if err != nil {
			return res, err
		}
		res.rss += rss
		res.hwm += hwm
		if m, err := p.scrape("controller_runtime_reconcile_total"); err == nil {
			res.reconciles += m["controller_runtime_reconcile_total"]
		}
	}
	b.say("%s: idle CPU %.4fs in %s; RSS %.1f MiB %s after convergence (peak %.1f MiB); %s reconciles",
		label, res.cpuIdle.Seconds(), b.idle, mib(res.rss), time.Since(tConv).Round(time.Second), mib(res.hwm), thousands(int(res.reconciles)))
	if len(procs) == 1 { // where the resident set goes, for both controllers alike
		b.sayResident(label, procs[0])
	}
	if b.idlePhase(kinds) {
		if err := b.idleModulePhase(ctx, label, variant, dyn, kinds, procs, &res); err != nil {
			return res, err
		}
	}
	b.say("%s: stopping", label)
	return res, nil
}

// waitConverged waits until total objects are Ready, reporting progress
// every 10 s and when created (the creates' result, when they end)
// reports; it fails when a process of procs exits or after b.timeout. It
// returns created, nil once the creates have ended.
func (b *bench) waitConverged(ctx context.Context, label string, ready *readiness, total int64, t0 time.Time, created chan error, procs []*proc) (chan error, error) {
	lastSay := time.Now()
	for ready.count.Load() < total {
		select {
		case err := <-created:
			if err != nil {
				return nil, err
			}
			b.say("%s: created %s objects in %s", label, thousands(int(total)), time.Since(t0).Round(time.Millisecond))
			created = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return nil, err
			}
		}
		if time.Since(t0) > b.timeout {
			return nil, fmt.Errorf("%d of %d objects Ready after %s", ready.count.Load(), total, b.timeout)
		}
		if time.Since(lastSay) >= 10*time.Second {
			b.say("%s: %s of %s Ready", label, thousands(int(ready.count.Load())), thousands(int(total)))
			lastSay = time.Now()
		}
	}
	return created, nil
}

// idlePhase reports whether a run of kinds has the idle phase: the
// many-module case, with -idle-module-timeout set.
func (b *bench) idlePhase(kinds []kind) bool { return len(kinds) > 1 && b.idleModules > 0 }

// idleModulePhase keeps changing one object of each of the first b.active
// kinds, every 2 s, for the idle module timeout plus 20 s, and then reads
// the summed RSS again: the operator has unloaded the other modules by
// then (checked on wasmreconcile_module_state{state="loaded"}), the native
// processes have had the same time and the same work.
func (b *bench) idleModulePhase(ctx context.Context, label, variant string, dyn dynamic.Interface, kinds []kind, procs []*proc, res *result) error {
	wait := b.idleModules + 20*time.Second
	b.say("%s: idle phase: changing %d of %d kinds every 2 s for %s", label, b.active, len(kinds), wait)
	end := time.Now().Add(wait)
	for i := 0; time.Now().Before(end); i++ {
		for _, k := range kinds[:b.active] {
			if err := touchWidget(ctx, dyn, k, i); err != nil {
				return err
			}
		}
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	res.rssIdleModules = 0
	for _, p := range procs {
		rss, _, err := memory(p.pid())
		if err != nil {
			return err
		}
		res.rssIdleModules += rss
	}
	if variant == "operator" {
		if rw, x, file, err := residentByKind(procs[0].pid()); err == nil {
			b.say("%s: the operator's resident set after the idle phase: %.1f MiB anonymous writable (Go heap, linear memories, stacks), %.1f MiB compiled guest code, %.1f MiB file-backed (the binary)",
				label, mib(rw), mib(x), mib(file))
		}
		loaded, err := procs[0].scrapeSeries("wasmreconcile_module_state", `state="loaded"`)
		if err != nil {
			return err
		}
		res.loadedModules = int(loaded)
		if res.loadedModules > b.active {
			return fmt.Errorf("%s: %d of %d modules still loaded after %s of idleness; want at most the %d active ones", label, res.loadedModules, len(kinds), wait, b.active)
		}
	}
	b.say("%s: after the idle phase: RSS %.1f MiB%s", label, mib(res.rssIdleModules), map[bool]string{true: fmt.Sprintf(", %d modules loaded", res.loadedModules), false: ""}[variant == "operator"])
	return nil
}

// metric is one row of a report: a value per run.
type metric struct {
	name  string
	unit  string
	value func(r result) float64
	goal  float64 // ratio goal (operator ÷ native ≤ goal); 0: none
}

// reportE2E formats the runs of one object count: each run, then per
// metric the mean of each variant, the ratio of the means, the ratios of
// the runs paired in each block, and the verdict.
func (b *bench) reportE2E(title string, runs []result) string {
	metrics := []metric{
		{"time to converge", "s", func(r result) float64 { return r.converge.Seconds() }, 0},
		// Goals of issue 26 (issue 13 had 1.25× for CPU).
		{"CPU to converge", "s", func(r result) float64 { return r.cpuConv.Seconds() }, 1.15},
		{"CPU to converge + queued work", "s", func(r result) float64 { return r.cpuDrain.Seconds() }, 1.15},
		{fmt.Sprintf("idle CPU over %s", b.idle), "s", func(r result) float64 { return r.cpuIdle.Seconds() }, 2},
		{"RSS 20 s after convergence", "MiB", func(r result) float64 { return mib(r.rss) }, 1.5},
		{"RSS peak (VmHWM)", "MiB", func(r result) float64 { return mib(r.hwm) }, 0},
		{"reconciles", "", func(r result) float64 { return r.reconciles }, 0},
		{"control plane CPU to converge", "s", func(r result) float64 { return r.cpConv.Seconds() }, 0},
	}
	return formatRuns(title, runs) + formatRatios(metrics, runs)
}

// reportModules formats the many-module runs.
func (b *bench) reportModules(title string, n int, runs []result) string {
	metrics := []metric{
		{fmt.Sprintf("summed RSS 20 s after convergence (%d native processes vs one operator)", n), "MiB", func(r result) float64 { return mib(r.rss) }, 0.6},
		{"summed RSS peak (VmHWM)", "MiB", func(r result) float64 { return mib(r.hwm) }, 0},
	}
	if b.idleModules > 0 {
		metrics = append(metrics, metric{fmt.Sprintf("summed RSS, %d of %d kinds idle past --idle-module-timeout %s", n-b.active, n, b.idleModules), "MiB",
			func(r result) float64 { return mib(r.rssIdleModules) }, 0.25})
	}
	metrics = append(metrics, []metric{
		{"time to converge", "s", func(r result) float64 { return r.converge.Seconds() }, 0},
		{"CPU to converge + queued work", "s", func(r result) float64 { return r.cpuDrain.Seconds() }, 0},
		{fmt.Sprintf("idle CPU over %s", b.idle), "s", func(r result) float64 { return r.cpuIdle.Seconds() }, 0},
		{"start-up CPU (to ready)", "s", func(r result) float64 { return r.startup.Seconds() }, 0},
	}...)
	return formatRuns(title, runs) + formatRatios(metrics, runs)
}

func formatRuns(title string, runs []result) string {
	var s strings.Builder
	fmt.Fprintf(&s, "\n== %s: runs in order, each on a fresh control plane\n", title)
	fmt.Fprintf(&s, "%-4s %-9s %5s %9s %9s %9s %9s %10s %9s %9s %11s %8s %10s  %s\n",
		"run", "variant", "procs", "create", "converge", "cpu@conv", "drain", "cpu@drain", "idle-cpu", "rss-MiB", "peak-MiB", "recons", "cp-cpu", "load")
	for i, r := range runs {
		fmt.Fprintf(&s, "%-4d %-9s %5d %8.1fs %8.1fs %8.2fs %8.1fs %9.2fs %8.4fs %9.1f %11.1f %8s %9.1fs  %s\n",
			i+1, r.variant, r.procs, r.create.Seconds(), r.converge.Seconds(), r.cpuConv.Seconds(), r.drain.Seconds(),
			r.cpuDrain.Seconds(), r.cpuIdle.Seconds(), mib(r.rss), mib(r.hwm), thousands(int(r.reconciles)), r.cpConv.Seconds(), r.load)
	}
	return s.String()
}

func formatRatios(metrics []metric, runs []result) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%-56s %10s %10s %10s %16s %7s  %s\n", "what (mean of the runs)", "native", "operator", "op÷native", "per block pair", "goal", "verdict")
	for _, m := range metrics {
		var nat, op []float64
		var pairs []float64
		for i := 0; i+4 <= len(runs); i += 4 {
			// native, operator, operator, native: pairs (1,2) and (4,3)
			pairs = append(pairs, ratio(m.value(runs[i+1]), m.value(runs[i])), ratio(m.value(runs[i+2]), m.value(runs[i+3])))
		}
		for _, r := range runs {
			if r.variant == "native" {
				nat = append(nat, m.value(r))
			} else {
				op = append(op, m.value(r))
			}
		}
		rt := ratio(mean(op), mean(nat))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range pairs {
			lo, hi = math.Min(lo, p), math.Max(hi, p)
		}
		pr := "-"
		if len(pairs) > 0 {
			pr = fmt.Sprintf("%s–%s", fmtRatio(lo), fmtRatio(hi))
		}
		goal, verdict := "-", "-"
		if m.goal > 0 {
			goal = fmt.Sprintf("≤%g×", m.goal)
			verdict = "missed"
			if rt <= m.goal {
				verdict = "met"
			}
		}
		name := m.name
		if m.unit != "" {
			name += " (" + m.unit + ")"
		}
		fmt.Fprintf(&s, "%-56s %10s %10s %10s %16s %7s  %s\n", name, fmtValue(mean(nat)), fmtValue(mean(op)), fmtRatio(rt), pr, goal, verdict)
	}
	return s.String()
}

func ratio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return a / b
}

func fmtRatio(r float64) string {
	if math.IsInf(r, 1) {
		return "∞"
	}
	return fmt.Sprintf("%.2f×", r)
}

func fmtValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v < 0.1:
		return fmt.Sprintf("%.4f", v) // idle CPU, in nanoseconds from schedstat
	}
	return fmt.Sprintf("%.2f", v)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// thousands formats n with commas: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-objects: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// loadavg is the 1-, 5- and 15-minute load average.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
