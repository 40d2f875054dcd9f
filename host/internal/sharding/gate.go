package sharding

import (
	"context"
	"sync"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// Gate admits the work of the slots this replica runs, for every module's
// reconciler alike: a reconcile enters its object's slot before it calls
// the guest and exits when it has written its result. Acquire and Release
// are a Coordinator's Options of the same names (or called from them):
// Release returns only once no work admitted on its slots still runs, so
// the Coordinator gives a slot up only when its work has stopped.
type Gate struct {
	space shard.Space

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when a slot's work ends
	active   []bool        // per slot: may work on it start
	inFlight []int         // per slot: admitted work still running
}

// NewGate returns a Gate over space with no slot active.
func NewGate(space shard.Space) *Gate {
	return &Gate{space: space, changed: make(chan struct{}), active: make([]bool, space.Slots()), inFlight: make([]int, space.Slots())}
}

// Space is the Gate's split of the hash space.
func (g *Gate) Space() shard.Space { return g.space }

// Enter admits work on slot if the slot is active; then the caller must
// call Exit(slot) when the work is done. It returns false, and the caller
// must drop the work, when this replica does not run the slot (another
// replica does, or will).
func (g *Gate) Enter(slot int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slot < 0 || slot >= len(g.active) || !g.active[slot] {
		return false
	}
	g.inFlight[slot]++
	return true
}

// Exit ends work that Enter admitted on slot.
func (g *Gate) Exit(slot int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight[slot]--
	if g.inFlight[slot] == 0 {
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// Active reports whether work on slot may start.
func (g *Gate) Active(slot int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slot >= 0 && slot < len(g.active) && g.active[slot]
}

// ActiveCount is the number of slots work may start on.
func (g *Gate) ActiveCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, a := range g.active {
		if a {
			n++
		}
	}
	return n
}

// Acquire lets work on slots start.
func (g *Gate) Acquire(slots []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range slots {
		g.active[s] = true
	}
}

// Release stops admitting work on slots and returns once none admitted
// before still runs, or when ctx ends (then some may: the caller must not
// give the slots up).
func (g *Gate) Release(ctx context.Context, slots []int) error {
	g.mu.Lock()
	for _, s := range slots {
		g.active[s] = false
	}
	g.mu.Unlock()
	for {
		g.mu.Lock()
		busy := false
		for _, s := range slots {
			if g.inFlight[s] > 0 {
				busy = true
				break
			}
		}
		changed := g.changed
		g.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
