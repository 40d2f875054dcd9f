package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryBudget bounds the memory that guests can make the host hold, so
// that however many modules run, and whatever their limits and manifests
// ask for, the process stays under its container's memory limit. Every
// instance reserves its memory cap (Limits.MemoryLimitPages) for as long
// as it lives, and every compile worker its CompileWorker.MaxMemory while it
// runs: the worst case of each, since a guest may touch every page it may
// grow to.
//
// A reservation that does not fit first closes idle instances of the
// modules sharing the budget, the longest idle first; then it waits until
// enough is released. A call waits at most its Limits.Timeout, then fails
// with a *MemoryBudgetError (retried with backoff); a load waits as long as
// its context allows. A reservation larger than the whole budget is refused
// at once. Engine.New lowers its memory ceiling (Options.Ceilings) to the
// budget, so that no instance is ever larger than the whole.
//
// Share one MemoryBudget among the engines of a process (the compiler's
// and the interpreter's). It is safe for concurrent use.
type MemoryBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiting int
	changed chan struct{} // closed, and replaced, whenever memory is released
	pools   map[*pool]struct{}

	waits    atomic.Uint64 // reservations that had to wait
	evicted  atomic.Uint64 // idle instances closed to make room
	refusals atomic.Uint64 // reservations that gave up
}

// NewMemoryBudget returns a budget of limit bytes.
func NewMemoryBudget(limit int64) (*MemoryBudget, error) {
	if limit < pageBytes {
		return nil, fmt.Errorf("memory budget of %d bytes is under one 64Ki wasm page", limit)
	}
	return &MemoryBudget{limit: limit, changed: make(chan struct{}), pools: map[*pool]struct{}{}}, nil
}

// MemoryBudgetStats are a budget's figures now.
type MemoryBudgetStats struct {
	// Limit is the budget, and Reserved what its reservations hold now, in
	// bytes.
	Limit, Reserved int64
	// Waiting counts the reservations waiting now.
	Waiting int
	// Waits counts the reservations that had to wait, Evicted the idle
	// instances closed to make room, and Refused the reservations that
	// gave up (a call past its timeout), since the budget was made.
	Waits, Evicted, Refused uint64
}

// Stats returns the budget's figures.
func (b *MemoryBudget) Stats() MemoryBudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return MemoryBudgetStats{Limit: b.limit, Reserved: b.used, Waiting: b.waiting,
		Waits: b.waits.Load(), Evicted: b.evicted.Load(), Refused: b.refusals.Load()}
}

// Limit is the budget in bytes.
func (b *MemoryBudget) Limit() int64 { return b.limit }

// reservation is memory held from a budget until Release.
type reservation struct {
	b    *MemoryBudget
	n    int64
	once sync.Once
}

// Release gives the memory back. Releasing twice, or a nil reservation,
// does nothing.
func (r *reservation) Release() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		b := r.b
		b.mu.Lock()
		b.used -= r.n
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	})
}

// budgetExceededError is acquire's error for a reservation that cannot be
// made: larger than the whole budget, or not made before ctx ended.
type budgetExceededError struct {
	need, limit, reserved int64
	waited                time.Duration
	never                 bool
	err                   error // ctx's error when it ended the wait
}

func (e *budgetExceededError) Error() string {
	if e.never {
		return fmt.Sprintf("%s is more than the whole guest memory budget of %s", quantity(e.need), quantity(e.limit))
	}
	return fmt.Sprintf("waited %s for %s of the guest memory budget of %s (%s reserved by other instances and compiles)",
		e.waited.Round(time.Millisecond), quantity(e.need), quantity(e.limit), quantity(e.reserved))
}

func (e *budgetExceededError) Unwrap() error { return e.err }

// acquire reserves n bytes for who (for errors), closing idle instances
// and then waiting as needed, until ctx ends. It returns the reservation
// and how long it waited.
func (b *MemoryBudget) acquire(ctx context.Context, n int64, who string) (*reservation, time.Duration, error) {
	if n > b.limit {
		b.refusals.Add(1)
		return nil, 0, &budgetExceededError{need: n, limit: b.limit, never: true}
	}
	var start time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			if !start.IsZero() {
				b.waiting--
			}
			b.mu.Unlock()
			var waited time.Duration
			if !start.IsZero() {
				waited = time.Since(start)
			}
			return &reservation{b: b, n: n}, waited, nil
		}
		need := b.used + n - b.limit
		pools := make([]*pool, 0, len(b.pools))
		for p := range b.pools {
			pools = append(pools, p)
		}
		changed := b.changed
		b.mu.Unlock()
		if b.evict(pools, need) > 0 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
			b.waits.Add(1)
			b.mu.Lock()
			b.waiting++
			b.mu.Unlock()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiting--
			reserved := b.used
			b.mu.Unlock()
			b.refusals.Add(1)
			return nil, time.Since(start), &budgetExceededError{need: n, limit: b.limit, reserved: reserved, waited: time.Since(start), err: ctx.Err()}
		}
	}
}

// evict closes idle instances of pools, the longest idle first, until
// they hold need bytes less, and returns how many bytes it freed.
func (b *MemoryBudget) evict(pools []*pool, need int64) int64 {
	type candidate struct {
		p     *pool
		since time.Time
	}
	var freed int64
	for freed < need {
		var oldest []candidate
		for _, p := range pools {
			if since, ok := p.oldestIdle(); ok {
				oldest = append(oldest, candidate{p, since})
			}
		}
		if len(oldest) == 0 {
			break
		}
		sort.Slice(oldest, func(i, j int) bool { return oldest[i].since.Before(oldest[j].since) })
		n := oldest[0].p.evictOldest()
		if n == 0 {
			continue // taken meanwhile: look again
		}
		b.evicted.Add(1)
		freed += n
	}
	return freed
}

func (b *MemoryBudget) addPool(p *pool) {
	b.mu.Lock()
	b.pools[p] = struct{}{}
	b.mu.Unlock()
}

func (b *MemoryBudget) removePool(p *pool) {
	b.mu.Lock()
	delete(b.pools, p)
	b.mu.Unlock()
}

// MemoryBudgetError reports a call that waited its whole timeout for its
// instance's memory within the operator's guest memory budget
// (Options.MemoryBudget). It is retried with backoff.
type MemoryBudgetError struct {
	Module string
	Call   string
	// Need is the instance's memory cap, in bytes; Limit the budget and
	// Reserved what other instances and compiles held when the wait ended.
	Need, Limit, Reserved int64
	Waited                time.Duration
	// Never is true when Need is over the whole budget: the call could
	// never run.
	Never bool
}

func (e *MemoryBudgetError) Error() string {
	if e.Never {
		return fmt.Sprintf("module[%s] %s: its memory cap of %s is more than the operator's whole guest memory budget of %s; lower spec.limits.memoryPages (or --memory-limit-pages), or raise --memory-budget",
			e.Module, e.Call, quantity(e.Need), quantity(e.Limit))
	}
	return fmt.Sprintf("module[%s] %s: waited %s for %s of the operator's guest memory budget of %s, held by other instances and compiles (%s reserved); retried with backoff; lower spec.limits.memoryPages, lower other modules' instances, or raise --memory-budget",
		e.Module, e.Call, e.Waited.Round(time.Millisecond), quantity(e.Need), quantity(e.Limit), quantity(e.Reserved))
}
