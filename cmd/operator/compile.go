package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
)

// complexityFlags are the compile-shape limits, with the same names and
// defaults for run, invoke and test, so that a module refused in the
// cluster is refused in CI too.
type complexityFlags struct {
	function, module uint64
}

func (c *complexityFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&c.function, "max-function-complexity", engine.DefaultMaxFunctionComplexity, "refuse, before compiling, a module with a function whose (locals+1)*(blocks+1) is over this: the optimizing compiler's time and memory grow with it (a compile bomb; docs/metering.md); the widget's largest is about 10,000")
	fs.Uint64Var(&c.module, "max-module-complexity", engine.DefaultMaxModuleComplexity, "refuse, before compiling, a module whose functions' complexities add up to more than this")
}

func (c *complexityFlags) apply(o *engine.CompileOptions) {
	o.MaxFunctionComplexity, o.MaxModuleComplexity = c.function, c.module
}

// compileFlags are operator run's (and dev's) compile workers and guest
// memory budget.
type compileFlags struct {
	complexity complexityFlags
	inProcess  bool
	memory     string
	cpu        time.Duration
	timeout    time.Duration
	code       string
	workers    int
	budget     string
	cacheMax   string
}

func (c *compileFlags) register(fs *flag.FlagSet) {
	c.complexity.register(fs)
	fs.BoolVar(&c.inProcess, "compile-in-process", false, "compile modules in the operator's own process instead of worker processes under the --compile-* limits (a module's bytes can then make the compiler take the operator's memory)")
	fs.StringVar(&c.memory, "compile-max-memory", "384Mi", "memory limit of one compile worker (its data segment); a compile over it fails the load as InvalidModule (the widget's compile needs under 192Mi)")
	fs.DurationVar(&c.cpu, "compile-max-cpu", engine.DefaultCompileMaxCPU, "CPU time limit of one compile worker (whole seconds)")
	fs.DurationVar(&c.timeout, "compile-timeout", engine.DefaultCompileTimeout, "wall-clock limit of one compile worker")
	fs.StringVar(&c.code, "compile-max-code-bytes", "256Mi", "most machine code one compile may produce (the widget's is about 15Mi)")
	fs.IntVar(&c.workers, "compile-workers", engine.DefaultCompileConcurrency, "compile workers running at once; more compiles wait for one")
	fs.StringVar(&c.cacheMax, "compilation-cache-max-size", "512Mi", `most the files under --compilation-cache-dir (or the compile workers' own directory) may add up to: past it the least recently used are removed, never what an unloaded module needs to come back (about 24Mi per Go module version, 1Mi per Rust one); "0" turns the bound off. Keep it under the volume's size: an emptyDir past its sizeLimit gets the pod evicted`)
	fs.StringVar(&c.budget, "memory-budget", "auto", fmt.Sprintf(`guest memory budget: what every instance's memory cap and every running compile worker's memory limit may add up to, a size (1536Mi) or "auto": %d%% of the container's memory limit (cgroup, else GOMEMLIMIT, else the machine's memory); an instance that does not fit waits (wasmreconcile_memory_budget_*). "0" turns it off`, operator.DefaultMemoryBudgetPercent))
}

// apply sets the flags' compile options and budget in opts, and says what
// the budget is and where it comes from.
func (c *compileFlags) apply(opts *operator.Options) (string, error) {
	c.complexity.apply(&opts.Engine.Compile)
	var err error
	if opts.Engine.CompilationCacheMaxBytes, err = boundFlag("--compilation-cache-max-size", c.cacheMax); err != nil {
		return "", err
	}
	if !c.inProcess {
		w, err := engine.SelfCompileWorker()
		if err != nil {
			return "", fmt.Errorf("%w; pass --compile-in-process", err)
		}
		if w.MaxMemory, err = quantityFlag("--compile-max-memory", c.memory); err != nil {
			return "", err
		}
		if w.MaxCodeBytes, err = quantityFlag("--compile-max-code-bytes", c.code); err != nil {
			return "", err
		}
		if c.cpu <= 0 || c.timeout <= 0 || c.workers <= 0 {
			return "", fmt.Errorf("--compile-max-cpu, --compile-timeout and --compile-workers must be positive")
		}
		w.MaxCPU, w.Timeout, w.MaxConcurrent = c.cpu, c.timeout, c.workers
		opts.Engine.Compile.Worker = w
	}
	switch v := strings.TrimSpace(c.budget); v {
	case "auto", "":
		l := operator.DetectMemoryLimit()
		opts.Engine.MemoryBudget = l.Bytes / 100 * operator.DefaultMemoryBudgetPercent
		return fmt.Sprintf("%d MiB, %d%% of %d MiB (%s)", opts.Engine.MemoryBudget>>20, operator.DefaultMemoryBudgetPercent, l.Bytes>>20, l.Source), nil
	case "0":
		opts.Engine.MemoryBudget = 0
		return "none (--memory-budget=0)", nil
	default:
		b, err := quantityFlag("--memory-budget", v)
		if err != nil {
			return "", err
		}
		opts.Engine.MemoryBudget = b
		return fmt.Sprintf("%d MiB (--memory-budget)", b>>20), nil
	}
}

// quantityFlag parses a size flag: a Kubernetes quantity of bytes.
// boundFlag reads the size of a bound flag: a size (quantityFlag), or "0"
// for no bound, which is 0.
func boundFlag(name, v string) (int64, error) {
	if v = strings.TrimSpace(v); v == "0" {
		return 0, nil
	}
	b, err := quantityFlag(name, v)
	if err != nil {
		return 0, fmt.Errorf(`%w, or "0" for no bound`, err)
	}
	return b, nil
}

func quantityFlag(name, v string) (int64, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w; use a size such as 512Mi", name, v, err)
	}
	b, ok := q.AsInt64()
	if !ok || b <= 0 {
		return 0, fmt.Errorf("%s %s must be a positive size such as 512Mi", name, v)
	}
	return b, nil
}
