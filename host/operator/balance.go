package operator

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// Balancing by load (docs/scaling.md, "Balancing by load"): every
// replica counts the objects of the slots it works on and publishes the
// counts in its shard Lease; the elected replica, every
// ShardingOptions.BalanceInterval, moves slots from the most to the least
// loaded replicas when one holds more than the mean by BalanceTolerance
// (shard.Balance), and publishes the plan in its Lease; every replica
// follows the newest plan it sees in any live Lease and publishes it in
// its own, so that a plan outlives the replica that made it. A slot moved
// by a plan changes hands as any other: by claims (package sharding).
const (
	// AnnotationShardLoad holds the objects of the slots a replica works
	// on: "g=GENERATION;s=SLOTS;c=SLOT:COUNT,…", GENERATION and SLOTS its
	// claims' when it counted (slots without objects left out of c).
	AnnotationShardLoad = "wasmreconcile.io/shard-load"
	// AnnotationShardPlan holds the balancing plan a replica follows
	// (shard.FormatPlan): "v=VERSION;MEMBER=SLOTS;…".
	AnnotationShardPlan = "wasmreconcile.io/shard-plan"
)

// load is a replica's published AnnotationShardLoad.
type load struct {
	generation int64
	slots      []int         // the slots counted: its claims then
	counts     map[int]int64 // objects per slot, slots without any left out
}

func formatLoad(l load) string {
	var b strings.Builder
	b.WriteString("g=" + strconv.FormatInt(l.generation, 10) + ";s=" + shard.FormatSlots(l.slots) + ";c=")
	for i, slot := range slices.Sorted(maps.Keys(l.counts)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(slot) + ":" + strconv.FormatInt(l.counts[slot], 10))
	}
	return b.String()
}

func parseLoad(s string, slots int) (load, error) {
	var l load
	parts := strings.Split(s, ";")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "g=") || !strings.HasPrefix(parts[1], "s=") || !strings.HasPrefix(parts[2], "c=") {
		return l, fmt.Errorf("load %q: want g=GENERATION;s=SLOTS;c=SLOT:COUNT,…", s)
	}
	var err error
	if l.generation, err = strconv.ParseInt(parts[0][2:], 10, 64); err != nil || l.generation < 0 {
		return load{}, fmt.Errorf("load %q: generation is not a count", s)
	}
	if l.slots, err = shard.ParseSlots(parts[1][2:], slots); err != nil {
		return load{}, fmt.Errorf("load %q: %w", s, err)
	}
	l.counts = map[int]int64{}
	if c := parts[2][2:]; c != "" {
		for _, kv := range strings.Split(c, ",") {
			k, v, ok := strings.Cut(kv, ":")
			slot, err1 := strconv.Atoi(k)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil || n < 0 || !slices.Contains(l.slots, slot) {
				return load{}, fmt.Errorf("load %q: count %q: want SLOT:COUNT of a counted slot", s, kv)
			}
			l.counts[slot] = n
		}
	}
	return l, nil
}

// followPlan is the plan this replica follows: the newest of its own and
// the plans published in the group's Leases (shard.Plan.Newer), kept as
// its own. Released and expired Leases count too, so that replicas that
// all restart at once (an outage, a rollout of a StatefulSet) follow the
// plan they left off with; moves to replicas not live are ignored.
func (s *shards) followPlan() shard.Plan {
	peers := s.coord.Membership().Kept(AnnotationShardPlan)
	s.balanceMu.Lock()
	defer s.balanceMu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		v := peers[id]
		p, err := shard.ParsePlan(v, s.space.Slots())
		if err != nil {
			if s.badPlan[id] != v {
				s.badPlan[id] = v
				s.log.Info("ignoring a balancing plan that does not parse", "lease", id, "error", err.Error())
			}
			continue
		}
		if p.Newer(s.plan) {
			s.plan = p
		}
	}
	return s.plan
}

// publish is the membership's Annotations: the shadow comparison counts,
// this replica's load and the plan it follows.
func (s *shards) publish() map[string]string {
	out := s.publishShadowCounts()
	s.balanceMu.Lock()
	l, p := s.load, s.plan
	s.balanceMu.Unlock()
	if l != "" || p.Version > 0 {
		if out == nil {
			out = map[string]string{}
		}
		if l != "" {
			out[AnnotationShardLoad] = l
		}
		if p.Version > 0 {
			out[AnnotationShardPlan] = shard.FormatPlan(p)
		}
	}
	return out
}

// countLoad counts the objects of every running module's kind in the
// slots this replica works on, for publish, when its claims are the
// slots it runs (not while slots change hands) and every module's store
// could be read.
func (s *shards) countLoad(ctx context.Context) {
	if s.supervisor == nil {
		return
	}
	claims := s.coord.Membership().Claims()
	active := s.coord.Active()
	if !slices.Equal(claims.Slots, active) {
		return
	}
	counts := map[int]int64{}
	var total int64
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !s.supervisor.EachStored(ctx, func(namespace string, uid types.UID) {
		if slot := s.slotOf(namespace, uid); s.gate.Active(slot) {
			counts[slot]++
			total++
		}
	}) {
		return
	}
	if !slices.Equal(active, s.coord.Active()) {
		return // slots moved while counting
	}
	s.balanceMu.Lock()
	s.load = formatLoad(load{generation: claims.Generation, slots: active, counts: counts})
	s.balanceMu.Unlock()
	s.metrics.ShardLoad.Set(float64(total))
}

// balance, on the elected replica, makes a new plan when a replica holds
// more than the mean load by BalanceTolerance, and follows it. It does
// nothing while slots change hands (every live replica's published load
// must have been counted under its claims now, and those claims must be
// what the plan in force gives it), nor while the loads' total moves by
// more than a quarter of BalanceTolerance between two checks. runBalance
// alone calls it.
func (s *shards) balance() (moved int, why string) {
	view := s.coord.Membership().View()
	plan := s.followPlan()
	ids := view.Identities()
	a := shard.AssignPlanned(s.space, ids, plan)
	peers := s.coord.Membership().Peers(AnnotationShardLoad)
	s.balanceMu.Lock()
	own := s.load
	s.balanceMu.Unlock()
	loads := make([]int64, s.space.Slots())
	var total int64
	for _, m := range view.Members {
		v, ok := peers[m.Identity]
		if m.Self {
			v, ok = own, own != ""
		}
		switch {
		case m.All:
			return 0, fmt.Sprintf("%s's claims do not parse", m.Identity)
		case !ok:
			return 0, fmt.Sprintf("%s has not published its load", m.Identity)
		}
		l, err := parseLoad(v, s.space.Slots())
		if err != nil {
			return 0, fmt.Sprintf("%s's load: %v", m.Identity, err)
		}
		if l.generation != m.Claims.Generation || !slices.Equal(l.slots, m.Claims.Slots) || !slices.Equal(m.Claims.Slots, a.Owned(m.Identity)) {
			return 0, fmt.Sprintf("slots are changing hands (%s)", m.Identity)
		}
		for slot, n := range l.counts {
			loads[slot] = n
			total += n
		}
	}
	// Replicas count at their own times, up to half an interval and a
	// renewal apart: while objects arrive or leave in bulk their counts
	// disagree by more than the imbalance, and a plan on them would be
	// undone by the next. Plan only on loads that held still since the
	// last check.
	prev := s.balanceTotal
	s.balanceTotal = total
	if prev == 0 || math.Abs(float64(total-prev)) > float64(prev)*s.opts.BalanceTolerance/4 {
		return 0, fmt.Sprintf("the loads are moving (%d objects, %d at the last check)", total, prev)
	}
	if plan.Version >= shard.MaxPlanVersion {
		why := fmt.Sprintf("the plan followed has the largest version, %d: no newer plan can follow it; delete the group's Leases (label %s=%s) to start over", plan.Version, membership.LabelGroup, s.opts.Group)
		if !s.stuckLogged {
			s.stuckLogged = true
			s.log.Info("not balancing by load", "why", why)
		}
		return 0, why
	}
	next, ok := shard.Balance(s.space, ids, plan, loads, s.opts.BalanceTolerance, max(1, s.space.Slots()/8))
	if !ok {
		return 0, "balanced"
	}
	b := shard.AssignPlanned(s.space, ids, next)
	moved = len(a.Moved(b))
	s.balanceMu.Lock()
	if !next.Newer(s.plan) {
		s.balanceMu.Unlock()
		return 0, "a newer plan arrived"
	}
	s.plan = next
	s.balanceMu.Unlock()
	s.log.Info("balancing by load", "plan", next.Version, "moved", moved, "before", a.Loads(loads), "after", b.Loads(loads))
	s.metrics.ShardBalanceMoves.Add(float64(moved))
	s.coord.Changed(view)
	return moved, ""
}

// runBalance counts this replica's load every half BalanceInterval and,
// on the elected replica, balances every BalanceInterval, until ctx ends.
// With a negative BalanceTolerance it does neither (plans made elsewhere
// are still followed).
func (s *shards) runBalance(ctx context.Context) {
	if s.opts.BalanceTolerance < 0 {
		return
	}
	tick := time.NewTicker(s.opts.BalanceInterval / 2)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.countLoad(ctx)
		if !s.leading() || time.Since(last) < s.opts.BalanceInterval {
			continue
		}
		last = time.Now()
		if _, why := s.balance(); why != "" && why != "balanced" {
			s.log.V(1).Info("not balancing by load now", "why", why)
		}
	}
}

// planSummary is /readyz/modules' words on the plan followed.
func (s *shards) planSummary() string {
	s.balanceMu.Lock()
	defer s.balanceMu.Unlock()
	if s.plan.Version == 0 {
		return "no slots moved for load"
	}
	live := s.coord.Assignment()
	n := 0
	for slot, m := range s.plan.Moves {
		if live.Owner(slot) == m {
			n++
		}
	}
	return fmt.Sprintf("plan %d moves %d slots for load", s.plan.Version, n)
}
