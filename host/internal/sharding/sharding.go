// Package sharding runs a replica's share of the work (issue 27): from the
// group's membership it computes which slots this replica owns (package
// shard), claims them in its Lease (package membership), and starts their
// work only once no other replica may be working on them; it stops the
// work of slots it no longer owns before it gives them up.
//
// The rules that keep two replicas off one slot:
//
//  1. Work on a slot starts only after this replica's claim on it is
//     written, and a view listed after that write shows no other live
//     member claiming it. Of two replicas that claim a slot at once, the
//     later writer's check sees the earlier one's claim.
//  2. A claim is dropped only after the slot's work has stopped
//     (Options.Release has returned).
//  3. On contention (a fresh view shows another claim on a slot this
//     replica claimed but has not started) this replica withdraws its
//     claim and tries again when the views change; with stable membership
//     only the slot's owner claims it, so contention ends.
//  4. A replica that loses its Lease stops every slot at once
//     (membership's RenewDeadline < LeaseDuration rule).
package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// Options configure a Coordinator. Space, Acquire and Release are
// required.
type Options struct {
	// Space is the split of the hash space into slots; every replica of
	// the group must use the same.
	Space shard.Space
	// Acquire is called with slots whose work may start now. It must not
	// block for long.
	Acquire func(slots []int)
	// Release is called with slots whose work must stop; it returns once
	// no work on them runs (queued objects dropped, calls in flight
	// finished). Until it returns the slots stay claimed. When the Lease
	// is lost during a step it may be called again for slots it already
	// stopped: it must take that as done.
	Release func(ctx context.Context, slots []int)
	// OnAssignment, when set, is called with each new assignment and the
	// slots that moved from the previous one, for metrics and Events.
	OnAssignment func(a shard.Assignment, moved []int)
	// Plan, when set, is the balancing plan to follow (shard.Balance): the
	// assignment is shard.AssignPlanned with it. It is read at every
	// step (each view and each Retry), so a new plan takes effect within
	// Retry. Default: none (rendezvous hashing alone).
	Plan func() shard.Plan
	// Retry is how often a pending slot (claimed elsewhere) is tried again
	// without a change of view. Default: membership.DefaultRetryPeriod.
	Retry time.Duration
	// Settle is how long a replica waits before its first claims when no
	// other live member claims a slot (it is alone, or its peers are
	// starting too), listing the Leases again at its end; it claims at
	// once when a peer's claims appear. Replicas that start together (a
	// scale-up from zero, a restart after an outage) then split the slots
	// at once, instead of the first claiming them all, caching every
	// object and handing most back. A replica joining a group at work
	// claims its share at once, so a join or a rolling update waits for
	// nothing. Default: DefaultSettle; negative: no wait.
	Settle time.Duration
	// Log receives the claims that could not be written (each is tried
	// again at the next view or retry). Default: discarded.
	Log logr.Logger
}

// DefaultSettle is Options.Settle's default: longer than replicas started
// together take to write their Leases one after another (about a second
// on a loaded 2-core machine, after each compiled its modules).
const DefaultSettle = 3 * time.Second

// Coordinator turns membership views into started and stopped slots.
type Coordinator struct {
	opts       Options
	membership *membership.Membership
	changed    chan struct{}

	// Step's own (it runs in Run's goroutine only): whether this replica
	// may claim (a peer claims slots, or it waited Settle), else when its
	// wait ends and a timer for that.
	settled    bool
	settleAt   time.Time
	settleWake <-chan time.Time

	mu         sync.Mutex
	lost       bool  // the Lease was lost: nothing starts again
	active     []int // slots whose work runs, ascending
	generation int64
	assignment shard.Assignment
}

// New returns a Coordinator with a Membership made from mopts, which its
// Run runs: the Membership's OnChange wakes the Coordinator and its OnLost
// stops every slot, each after mopts' own (which may be nil).
func New(mopts membership.Options, opts Options) (*Coordinator, error) {
	if opts.Acquire == nil || opts.Release == nil {
		return nil, errors.New("sharding: Acquire and Release are required")
	}
	if opts.Retry <= 0 {
		opts.Retry = membership.DefaultRetryPeriod
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	c := &Coordinator{opts: opts, changed: make(chan struct{}, 1)}
	onChange, onLost := mopts.OnChange, mopts.OnLost
	mopts.OnChange = func(v membership.View) {
		if onChange != nil {
			onChange(v)
		}
		c.Changed(v)
	}
	mopts.OnLost = func(err error) {
		c.Lost(context.Background())
		if onLost != nil {
			onLost(err)
		}
	}
	m, err := membership.New(mopts)
	if err != nil {
		return nil, err
	}
	c.membership = m
	return c, nil
}

// Membership is the Coordinator's Membership, for its views.
func (c *Coordinator) Membership() *membership.Membership { return c.membership }

// Changed tells the Coordinator that the view changed (New makes it the
// Membership's OnChange). It never blocks.
func (c *Coordinator) Changed(membership.View) {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Active are the slots whose work runs now, ascending.
func (c *Coordinator) Active() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.active)
}

// Assignment is the assignment the Coordinator last computed.
func (c *Coordinator) Assignment() shard.Assignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assignment
}

// Lost stops the work of every slot at once (New makes it the
// Membership's OnLost).
func (c *Coordinator) Lost(ctx context.Context) {
	c.mu.Lock()
	c.lost = true
	active := c.active
	c.active = nil
	c.mu.Unlock()
	if len(active) > 0 {
		c.opts.Release(ctx, active)
	}
}

// ErrLost is returned by Run after the Lease was lost.
var ErrLost = errors.New("sharding: this replica lost its Lease; every slot's work was stopped")

// Run runs the Membership and reconciles the claims and the work of this
// replica with each view until ctx ends; then it stops every slot's work
// and only after that lets the Membership release the Lease, so that no
// slot moves while its work runs here. It returns nil then, or ErrLost
// once the Lease was lost (every slot's work stopped).
func (c *Coordinator) Run(ctx context.Context) error {
	mctx, stopMembership := context.WithCancel(context.Background())
	defer stopMembership()
	membershipDone := make(chan error, 1)
	go func() { membershipDone <- c.membership.Run(mctx) }()
	retry := time.NewTicker(c.opts.Retry)
	defer retry.Stop()
	for {
		c.mu.Lock()
		lost := c.lost
		c.mu.Unlock()
		if lost {
			<-membershipDone
			return ErrLost
		}
		// A claim not written is tried again at the next view or retry;
		// the slots already started keep running (their claims stand).
		if err := c.step(ctx); err != nil && ctx.Err() == nil {
			c.opts.Log.Info("claims not written; trying again", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			c.mu.Lock()
			active := c.active
			c.active = nil
			c.mu.Unlock()
			if len(active) > 0 {
				c.opts.Release(context.Background(), active)
			}
			stopMembership()
			<-membershipDone
			return nil
		case <-c.changed:
		case <-retry.C:
		case <-c.settleWake:
		}
	}
}

// workingPeer reports whether another live member of view claims a slot:
// a group at work, which a replica joins at once.
func workingPeer(view membership.View) bool {
	for _, mem := range view.Members {
		if !mem.Self && (mem.All || len(mem.Claims.Slots) > 0) {
			return true
		}
	}
	return false
}

// selfIn is this replica's identity if view holds it, else "".
func selfIn(view membership.View) string {
	for _, mem := range view.Members {
		if mem.Self {
			return mem.Identity
		}
	}
	return ""
}

// step runs the rules once against the current view.
func (c *Coordinator) step(ctx context.Context) error {
	m := c.membership
	view := m.View()
	self := selfIn(view)
	if self != "" && !c.settled {
		if workingPeer(view) || c.opts.Settle < 0 {
			c.settled = true
		} else {
			now := time.Now()
			if c.settleAt.IsZero() {
				c.settleAt = now.Add(c.opts.Settle)
				c.opts.Log.Info("no replica of the group claims slots yet; waiting for replicas starting now before claiming", "settle", c.opts.Settle.String(), "members", len(view.Members))
			}
			if now.Before(c.settleAt) {
				c.settleWake = time.After(c.settleAt.Sub(now))
				return nil
			}
			fresh, err := m.Refresh(ctx)
			if err != nil {
				return fmt.Errorf("sharding: listing the Leases at the end of the settle: %w", err)
			}
			view, self, c.settled, c.settleWake = fresh, selfIn(fresh), true, nil
		}
	}
	c.mu.Lock()
	active := slices.Clone(c.active)
	c.mu.Unlock()
	if self == "" {
		// Not a member (yet, or any more): nothing may run.
		if len(active) > 0 {
			c.mu.Lock()
			c.active = nil
			c.mu.Unlock()
			c.opts.Release(ctx, active)
		}
		return nil
	}
	var plan shard.Plan
	if c.opts.Plan != nil {
		plan = c.opts.Plan()
	}
	a := shard.AssignPlanned(c.opts.Space, view.Identities(), plan)
	c.mu.Lock()
	prev := c.assignment
	changed := !slices.Equal(prev.Members(), a.Members()) || (len(a.Members()) > 0 && len(prev.Moved(a)) > 0)
	if changed {
		c.generation++
		c.assignment = a
	}
	gen := c.generation
	c.mu.Unlock()
	if changed && c.opts.OnAssignment != nil {
		var moved []int
		if len(prev.Members()) > 0 {
			moved = prev.Moved(a)
		}
		c.opts.OnAssignment(a, moved)
	}
	owned := a.Owned(self)

	// Rule 2: stop, then give up, what this replica no longer owns.
	var stop []int
	for _, s := range active {
		if !slices.Contains(owned, s) {
			stop = append(stop, s)
		}
	}
	if len(stop) > 0 {
		c.opts.Release(ctx, stop)
		active = slices.DeleteFunc(active, func(s int) bool { return slices.Contains(stop, s) })
		c.mu.Lock()
		c.active = slices.Clone(active)
		c.mu.Unlock()
		if err := m.Claim(ctx, membership.Claims{Generation: gen, Slots: active}); err != nil {
			return fmt.Errorf("sharding: dropping claims on %d slots: %w", len(stop), err)
		}
	}

	// Rule 1: claim what it owns and no one else claims, then check.
	var want []int
	for _, s := range owned {
		if !slices.Contains(active, s) && !view.ClaimedByOthers(s) {
			want = append(want, s)
		}
	}
	if len(want) == 0 {
		return nil
	}
	claims := append(slices.Clone(active), want...)
	slices.Sort(claims)
	if err := m.Claim(ctx, membership.Claims{Generation: gen, Slots: claims}); err != nil {
		return fmt.Errorf("sharding: claiming %d slots: %w", len(want), err)
	}
	fresh, err := m.Refresh(ctx)
	if err != nil {
		// Unchecked claims: withdraw them (rule 3) and try again.
		_ = m.Claim(ctx, membership.Claims{Generation: gen, Slots: active})
		return err
	}
	var start, withdraw []int
	for _, s := range want {
		if fresh.ClaimedByOthers(s) {
			withdraw = append(withdraw, s)
		} else {
			start = append(start, s)
		}
	}
	if len(withdraw) > 0 {
		keep := slices.DeleteFunc(slices.Clone(claims), func(s int) bool { return slices.Contains(withdraw, s) })
		// On an error the withdrawn slots stay claimed, never started,
		// until the next step writes the claims again.
		if err := m.Claim(ctx, membership.Claims{Generation: gen, Slots: keep}); err != nil {
			c.opts.Log.Info("withdrawn claims not written; trying again", "slots", withdraw, "error", err.Error())
		}
	}
	if len(start) > 0 {
		c.mu.Lock()
		if c.lost {
			c.mu.Unlock()
			return ErrLost
		}
		c.active = append(c.active, start...)
		slices.Sort(c.active)
		c.mu.Unlock()
		c.opts.Acquire(start)
	}
	return nil
}
