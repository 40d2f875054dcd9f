package engine

import (
	"fmt"
	"time"
)

// Default ceilings: what no caller, ReconcileModule spec or manifest may
// exceed when Options.Ceilings leaves the field zero. The operator's
// --max-fuel, --max-timeout and --max-memory flags set them.
const (
	DefaultMaxFuel        = 10 * DefaultFuel // 5,000,000,000 units per call
	DefaultMaxTimeout     = 60 * time.Second // per call
	DefaultMaxMemoryPages = 4096             // 256 MiB: well under a container's limit; the budget (MemoryBudget) bounds the sum
)

const (
	maxMemoryPages = 65536    // the wasm32 maximum: 4 GiB
	pageBytes      = 64 << 10 // one wasm page
	gib, mib       = 1 << 30, 1 << 20
)

// Clamp is one limit that was over its ceiling and was lowered to it.
type Clamp struct {
	// Limit is "fuel", "timeout" or "memory".
	Limit string
	// Manifest is true when the value came from the module's manifest, and
	// false when the caller asked for it (the operator's flags or a
	// ReconcileModule's spec.limits).
	Manifest bool
	// Requested and Ceiling are the value asked for and the value used:
	// fuel units, nanoseconds, or 64 KiB pages.
	Requested, Ceiling uint64
	// Flag is the operator flag that sets the ceiling.
	Flag string
	// Allowance is true when the manifest asked for more than the caller
	// allows (its own value, or the default): a manifest may ask for less,
	// never more. Ceiling is then what the caller allows, and Flag where
	// it is set.
	Allowance bool
}

// String says what was clamped, e.g. "fuel 9000000000 clamped to the
// ceiling 5000000000 (--max-fuel)".
func (c Clamp) String() string {
	from := ""
	if c.Manifest {
		from = "the manifest's "
	}
	var req, ceil string
	switch c.Limit {
	case "timeout":
		req, ceil = time.Duration(c.Requested).String(), time.Duration(c.Ceiling).String()
	case "memory":
		req, ceil = pagesString(c.Requested), pagesString(c.Ceiling)
	default:
		req, ceil = fmt.Sprint(c.Requested), fmt.Sprint(c.Ceiling)
	}
	if c.Allowance {
		return fmt.Sprintf("the manifest's %s %s lowered to the %s the operator allows (%s): a manifest may ask for less, never more", c.Limit, req, ceil, c.Flag)
	}
	return fmt.Sprintf("%s%s %s clamped to the ceiling %s (%s)", from, c.Limit, req, ceil, c.Flag)
}

// pagesString renders a page count with its size: "16384 pages (1Gi)".
func pagesString(pages uint64) string {
	b := pages * pageBytes
	switch {
	case b%gib == 0:
		return fmt.Sprintf("%d pages (%dGi)", pages, b/gib)
	case b%mib == 0:
		return fmt.Sprintf("%d pages (%dMi)", pages, b/mib)
	}
	return fmt.Sprintf("%d pages (%dKi)", pages, b/1024)
}

// Clamped lists the limits that were over their ceilings (Options.Ceilings)
// when the module was loaded, and were lowered to them, one sentence each;
// nil when none was.
func (m *Module) Clamped() []string {
	if len(m.clamped) == 0 {
		return nil
	}
	out := make([]string, len(m.clamped))
	for i, c := range m.clamped {
		out[i] = c.String()
	}
	return out
}

// Clamps is Clamped as values.
func (m *Module) Clamps() []Clamp { return append([]Clamp(nil), m.clamped...) }

// ceilings returns c with its zero ceilings replaced by the defaults, or an
// error naming the first invalid one. Only Fuel, Timeout and
// MemoryLimitPages are ceilings; the other fields are ignored.
func (c Limits) ceilings() (Limits, error) {
	if c.Timeout < 0 {
		return c, fmt.Errorf("the timeout ceiling %s must not be negative", c.Timeout)
	}
	if c.MemoryLimitPages > maxMemoryPages {
		return c, fmt.Errorf("the memory ceiling of %d pages exceeds the wasm32 maximum of %d pages (4Gi)", c.MemoryLimitPages, maxMemoryPages)
	}
	out := Limits{Fuel: c.Fuel, Timeout: c.Timeout, MemoryLimitPages: c.MemoryLimitPages}
	if out.Fuel == 0 {
		out.Fuel = DefaultMaxFuel
	}
	if out.Timeout == 0 {
		out.Timeout = DefaultMaxTimeout
	}
	if out.MemoryLimitPages == 0 {
		out.MemoryLimitPages = DefaultMaxMemoryPages
	}
	return out, nil
}

// clamp returns l with each of its fuel, timeout and memory that is over
// its ceiling in c lowered to the ceiling, and a Clamp for each; manifest
// says where l's values came from. A zero ceiling in c is the default
// ceiling. Zero fields of l (unset: the manifest or the default fills them)
// stay zero; see lowerDefaults.
func (c Limits) clamp(l Limits, manifest bool) (Limits, []Clamp) {
	c, err := c.ceilings()
	if err != nil { // New refuses such ceilings; an Engine never holds one
		c, _ = Limits{}.ceilings()
	}
	var out []Clamp
	if l.Fuel > c.Fuel {
		out = append(out, Clamp{Limit: "fuel", Manifest: manifest, Requested: l.Fuel, Ceiling: c.Fuel, Flag: "--max-fuel"})
		l.Fuel = c.Fuel
	}
	if l.Timeout > c.Timeout {
		out = append(out, Clamp{Limit: "timeout", Manifest: manifest, Requested: uint64(l.Timeout), Ceiling: uint64(c.Timeout), Flag: "--max-timeout"})
		l.Timeout = c.Timeout
	}
	if l.MemoryLimitPages > c.MemoryLimitPages {
		out = append(out, Clamp{Limit: "memory", Manifest: manifest, Requested: uint64(l.MemoryLimitPages), Ceiling: uint64(c.MemoryLimitPages), Flag: "--max-memory"})
		l.MemoryLimitPages = c.MemoryLimitPages
	}
	return l, out
}

// lowerDefaults sets each zero fuel, timeout and memory of l whose default
// is over its ceiling in c to the ceiling: a ceiling below a default lowers
// the default. Nothing was asked for, so nothing is reported.
func (c Limits) lowerDefaults(l Limits) Limits {
	c, err := c.ceilings()
	if err != nil {
		return l
	}
	if l.Fuel == 0 && DefaultFuel > c.Fuel {
		l.Fuel = c.Fuel
	}
	if l.Timeout == 0 && DefaultTimeout > c.Timeout {
		l.Timeout = c.Timeout
	}
	if l.MemoryLimitPages == 0 && DefaultMemoryLimitPages > c.MemoryLimitPages {
		l.MemoryLimitPages = c.MemoryLimitPages
	}
	return l
}

// Ceilings are the engine's ceilings in force (Options.Ceilings with the
// defaults filled, the memory ceiling lowered to the MemoryBudget): only
// Fuel, Timeout and MemoryLimitPages are set.
func (e *Engine) Ceilings() Limits { return e.ceilings }
