package operator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// Balancing by load (docs/scaling.md, "Balancing by load"): every
// replica counts the objects of the slots it works on at the same
// moments (every half ShardingOptions.BalanceInterval, on the wall
// clock's multiples of it) and publishes the counts, with their moment,
// in its shard Lease; the elected replica, at most once a BalanceInterval,
// moves slots from the most to the least loaded replicas when, in the
// newest moment every replica counted at, one held more than the mean by
// BalanceTolerance (shard.Balance), and publishes the plan in its Lease;
// every replica follows the newest plan it sees in any Lease of the
// group, live or not, and publishes it in its own, so that a plan
// outlives the replica that made it. A slot moved by a plan changes hands
// as any other: by claims (package sharding).
const (
	// AnnotationShardLoad holds the objects of the slots a replica works
	// on: "g=GENERATION;s=SLOTS;t=MOMENT;c=SLOT:COUNT,…", GENERATION and
	// SLOTS its claims' when it counted, MOMENT when (Unix milliseconds,
	// a multiple of half the balance interval), slots without objects left
	// out of c.
	AnnotationShardLoad = "wasmreconcile.io/shard-load"
	// AnnotationShardPlan holds the balancing plan a replica follows
	// (shard.FormatPlan): "v=VERSION;MEMBER=SLOTS;…".
	AnnotationShardPlan = "wasmreconcile.io/shard-plan"
)

// load is a replica's published AnnotationShardLoad.
type load struct {
	generation int64
	slots      []int         // the slots counted: its claims then
	at         int64         // the moment counted at, Unix milliseconds
	counts     map[int]int64 // objects per slot, slots without any left out
}

func formatLoad(l load) string {
	var b strings.Builder
	b.WriteString("g=" + strconv.FormatInt(l.generation, 10) + ";s=" + shard.FormatSlots(l.slots) + ";t=" + strconv.FormatInt(l.at, 10) + ";c=")
	for i, slot := range slices.Sorted(maps.Keys(l.counts)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(slot) + ":" + strconv.FormatInt(l.counts[slot], 10))
	}
	return b.String()
}

// maxSlotLoad bounds a slot's count in a load, far above what one API
// server holds, so that the sums of every replica's counts over 4096
// slots cannot overflow into a load that is negative or wrong.
const maxSlotLoad = 1 << 40

func parseLoad(s string, slots int) (load, error) {
	var l load
	parts := strings.Split(s, ";")
	if len(parts) != 4 || !strings.HasPrefix(parts[0], "g=") || !strings.HasPrefix(parts[1], "s=") || !strings.HasPrefix(parts[2], "t=") || !strings.HasPrefix(parts[3], "c=") {
		return l, fmt.Errorf("load %q: want g=GENERATION;s=SLOTS;t=MOMENT;c=SLOT:COUNT,…", s)
	}
	var err error
	if l.generation, err = strconv.ParseInt(parts[0][2:], 10, 64); err != nil || l.generation < 0 {
		return load{}, fmt.Errorf("load %q: generation is not a count", s)
	}
	if l.slots, err = shard.ParseSlots(parts[1][2:], slots); err != nil {
		return load{}, fmt.Errorf("load %q: %w", s, err)
	}
	if l.at, err = strconv.ParseInt(parts[2][2:], 10, 64); err != nil || l.at < 0 {
		return load{}, fmt.Errorf("load %q: moment is not Unix milliseconds", s)
	}
	l.counts = map[int]int64{}
	if c := parts[3][2:]; c != "" {
		for _, kv := range strings.Split(c, ",") {
			k, v, ok := strings.Cut(kv, ":")
			slot, err1 := strconv.Atoi(k)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil || n < 0 || n > maxSlotLoad || !slices.Contains(l.slots, slot) {
				return load{}, fmt.Errorf("load %q: count %q: want SLOT:COUNT of a counted slot, COUNT up to 2^40", s, kv)
			}
			if _, dup := l.counts[slot]; dup {
				return load{}, fmt.Errorf("load %q: slot %d counted twice", s, slot)
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

// noMoment begins loadsAt's why when the replicas' counts share no
// moment.
const noMoment = "the replicas have not counted at one moment yet"

// keepLoads is how many of each replica's newest loads the elected
// replica keeps, to find a moment every replica counted at.
const keepLoads = 4

// loadHistory is the loads seen, by identity and by the moment counted
// at, the newest keepLoads of each identity; runBalance's own.
type loadHistory struct {
	loads map[string]map[int64]load
	bad   map[string]string // why an identity's published load did not parse
}

// add records l as id's load at its moment. Loads of id at later moments
// are dropped: a count is always of id's newest moment, so those are of
// a moment its clock named before it went back (kept, the newest first,
// they would crowd out every count after it).
func (h *loadHistory) add(id string, l load) {
	if h.loads == nil {
		h.loads = map[string]map[int64]load{}
	}
	m := h.loads[id]
	if m == nil {
		m = map[int64]load{}
		h.loads[id] = m
	}
	maps.DeleteFunc(m, func(at int64, _ load) bool { return at > l.at })
	m[l.at] = l
	for len(m) > keepLoads {
		delete(m, slices.Min(slices.Collect(maps.Keys(m))))
	}
}

// loadsAt are the objects per slot of the slots' space, as every member
// of view counted them at the newest moment all of them counted at, and
// that moment; why says, when there are none, why: a member's claims or
// load do not parse, a member has not counted at a moment the others
// did, or slots are changing hands (a member's load at that moment was
// not counted under the claims it has now, or those claims are not what
// owned, the plan in force, gives it).
func (h *loadHistory) loadsAt(view membership.View, owned func(id string) []int, slots int) (loads []int64, at int64, why string) {
	var moments []int64
	for i, m := range view.Members {
		if m.All {
			return nil, 0, fmt.Sprintf("%s's claims do not parse", m.Identity)
		}
		mine := h.loads[m.Identity]
		if len(mine) == 0 {
			if bad := h.bad[m.Identity]; bad != "" {
				return nil, 0, fmt.Sprintf("%s's load: %s", m.Identity, bad)
			}
			return nil, 0, fmt.Sprintf("%s has not published its load", m.Identity)
		}
		if i == 0 {
			moments = slices.Sorted(maps.Keys(mine))
			continue
		}
		moments = slices.DeleteFunc(moments, func(t int64) bool { _, ok := mine[t]; return !ok })
	}
	if len(moments) == 0 {
		var newest []string
		for _, m := range view.Members {
			t := slices.Max(slices.Collect(maps.Keys(h.loads[m.Identity])))
			newest = append(newest, m.Identity+" "+time.UnixMilli(t).UTC().Format(time.RFC3339))
		}
		return nil, 0, noMoment + " (newest counts: " + strings.Join(newest, ", ") + "; replicas count at the wall clock's multiples of half the balance interval: are their clocks within a minute of each other?)"
	}
	at = moments[len(moments)-1]
	loads = make([]int64, slots)
	for _, m := range view.Members {
		l := h.loads[m.Identity][at]
		if l.generation != m.Claims.Generation || !slices.Equal(l.slots, m.Claims.Slots) || !slices.Equal(m.Claims.Slots, owned(m.Identity)) {
			return nil, 0, fmt.Sprintf("slots are changing hands (%s)", m.Identity)
		}
		for slot, n := range l.counts {
			loads[slot] = n
		}
	}
	return loads, at, ""
}

// countLoad counts the objects of every running module's kind in the
// slots this replica works on, as counted at moment at, for publish (and
// into h), when its claims are the slots it runs (not while slots change
// hands, nor while the cache lists slots acquired) and every module's
// store could be read.
func (s *shards) countLoad(ctx context.Context, at time.Time, h *loadHistory) {
	if s.supervisor == nil {
		return
	}
	claims := s.coord.Membership().Claims()
	active := s.coord.Active()
	s.mu.Lock()
	listing := len(s.pending) > 0
	s.mu.Unlock()
	if listing || !slices.Equal(claims.Slots, active) {
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
	l := load{generation: claims.Generation, slots: active, at: at.UnixMilli(), counts: counts}
	h.add(s.opts.Identity, l)
	s.balanceMu.Lock()
	s.load = formatLoad(l)
	s.balanceMu.Unlock()
	s.metrics.ShardLoad.Set(float64(total))
}

// recordLoads adds the other live replicas' published loads to h, and
// forgets the loads of replicas no longer live.
func (s *shards) recordLoads(h *loadHistory) {
	h.bad = map[string]string{}
	peers := s.coord.Membership().Peers(AnnotationShardLoad)
	for id := range h.loads {
		if _, live := peers[id]; !live && id != s.opts.Identity {
			delete(h.loads, id)
		}
	}
	for id, v := range peers {
		l, err := parseLoad(v, s.space.Slots())
		if err != nil {
			h.bad[id] = err.Error()
			continue
		}
		h.add(id, l)
	}
}

// balance, on the elected replica, makes a new plan when a replica held
// more than the mean load by BalanceTolerance at the newest moment every
// live replica counted at (loadHistory.loadsAt), and follows it. It does
// nothing while slots change hands. runBalance alone calls it.
//
// The replicas count at the same moments by their clocks, so that their
// counts add up to one picture while objects arrive or leave in bulk
// (counts taken a renewal apart disagree, then, by more than the
// imbalance, and a plan on them is undone by the next).
func (s *shards) balance(h *loadHistory) (moved int, why string) {
	view := s.coord.Membership().View()
	plan := s.followPlan()
	ids := view.Identities()
	a := shard.AssignPlanned(s.space, ids, plan)
	loads, _, why := h.loadsAt(view, a.Owned, s.space.Slots())
	if why != "" {
		return 0, why
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

// runBalance, until ctx ends, counts this replica's load every half
// BalanceInterval, at the wall clock's multiples of it (the moments every
// replica counts at), and on the elected replica, a quarter interval
// after each (time for the others' counts to reach their Leases),
// records the loads published and balances, making at most one plan an
// interval. With a negative BalanceTolerance it does none of this (plans
// made elsewhere are still followed).
func (s *shards) runBalance(ctx context.Context) {
	if s.opts.BalanceTolerance < 0 {
		return
	}
	quarter := int64(s.opts.BalanceInterval / 4)
	var h loadHistory
	var lastPlan time.Time
	apart, apartLogged := 0, false // checks in a row whose counts shared no moment
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := (time.Now().UnixNano()/quarter + 1) * quarter
		timer.Reset(time.Until(time.Unix(0, next)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		switch (next / quarter) % 2 {
		case 0:
			s.countLoad(ctx, time.Unix(0, next), &h)
		case 1:
			if !s.leading() {
				continue
			}
			s.recordLoads(&h)
			if time.Since(lastPlan) < s.opts.BalanceInterval {
				continue
			}
			moved, why := s.balance(&h)
			if moved > 0 {
				lastPlan = time.Now()
			}
			// Counts that share no moment for longer than the elected
			// replica keeps them are clocks apart, not counts in flight:
			// said once, until balancing resumes.
			if strings.HasPrefix(why, noMoment) {
				apart++
			} else {
				apart, apartLogged = 0, false
			}
			switch {
			case apart > keepLoads && !apartLogged:
				apartLogged = true
				s.log.Info("not balancing by load", "why", why)
			case why != "" && why != "balanced":
				s.log.V(1).Info("not balancing by load now", "why", why)
			}
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
