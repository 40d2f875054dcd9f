package main

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// ceilingFlags are the operator's ceilings on per-call limits, with the
// same names and defaults for run, invoke and test, so that a module
// clamped in the cluster is clamped in CI too.
type ceilingFlags struct {
	fuel    uint64
	timeout time.Duration
	memory  string
}

func (c *ceilingFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&c.fuel, "max-fuel", engine.DefaultMaxFuel, fmt.Sprintf("ceiling on the fuel of one call (10x the default fuel, %d): no --fuel, spec.limits.fuel or manifest can exceed it; a value over it is clamped to it and reported", engine.DefaultFuel))
	fs.DurationVar(&c.timeout, "max-timeout", engine.DefaultMaxTimeout, "ceiling on the timeout of one call: no --timeout, spec.limits.timeout or manifest can exceed it; a value over it is clamped to it and reported")
	fs.StringVar(&c.memory, "max-memory", "256Mi", "ceiling on a guest's memory, a size (Kubernetes quantity, a multiple of 64Ki, at most 4Gi; not pages): no memory limit flag, spec.limits.memoryPages or manifest can exceed it; a value over it is clamped to it and reported")
}

// ceilings returns the flags as engine.Options.Ceilings.
func (c *ceilingFlags) ceilings() (engine.Limits, error) {
	if c.fuel == 0 {
		return engine.Limits{}, fmt.Errorf("--max-fuel must be positive")
	}
	if c.timeout <= 0 {
		return engine.Limits{}, fmt.Errorf("--max-timeout must be positive")
	}
	pages, err := memoryPages("--max-memory", c.memory)
	if err != nil {
		return engine.Limits{}, err
	}
	return engine.Limits{Fuel: c.fuel, Timeout: c.timeout, MemoryLimitPages: pages}, nil
}

// memoryPages parses a size flag into 64 KiB wasm pages: a Kubernetes
// quantity that is a whole number of pages, from 64Ki to 4Gi.
func memoryPages(flagName, v string) (uint32, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w; use a size such as 1Gi or 512Mi", flagName, v, err)
	}
	b, ok := q.AsInt64()
	if !ok || b < 64<<10 || b > 4<<30 {
		return 0, fmt.Errorf("%s %s is outside 64Ki..4Gi; it is a size such as 1Gi, not a number of pages", flagName, v)
	}
	if b%(64<<10) != 0 {
		return 0, fmt.Errorf("%s %s is not a whole number of 64Ki wasm pages", flagName, v)
	}
	return uint32(b / (64 << 10)), nil
}
