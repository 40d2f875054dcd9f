package shard

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// namespaceLoads are the objects per slot of n namespaces of per objects
// each, named as make bench-shard names them.
func namespaceLoads(s Space, n int, per int64) []int64 {
	loads := make([]int64, s.Slots())
	for i := range n {
		loads[s.SlotOf(ByNamespace, fmt.Sprintf("bench-%03d", i))] += per
	}
	return loads
}

func shares(a Assignment, loads []int64) (maxLoad, total int64) {
	for _, l := range a.Loads(loads) {
		maxLoad = max(maxLoad, l)
		total += l
	}
	return maxLoad, total
}

// TestBalanceBringsTheLargestShareNearTheMean: 300 namespaces of 100
// objects hashed into 256 slots give three members unequal shares; one
// plan brings every member within half the tolerance of the mean (as the
// slots' weights allow), moving few slots, and a second call with the
// same loads makes no plan.
func TestBalanceBringsTheLargestShareNearTheMean(t *testing.T) {
	s := space(t, DefaultSlots)
	for _, n := range []int{2, 3, 4, 5} {
		members := names("op-", n)
		loads := namespaceLoads(s, 300, 100)
		before := Assign(s, members)
		beforeMax, total := shares(before, loads)
		mean := float64(total) / float64(n)
		plan, ok := Balance(s, members, Plan{}, loads, 0.1, s.Slots()/8)
		after := AssignPlanned(s, members, plan)
		afterMax, _ := shares(after, loads)
		t.Logf("%d members: largest share %.1f%% -> %.1f%% of the objects, %d slots moved", n, 100*float64(beforeMax)/float64(total), 100*float64(afterMax)/float64(total), len(before.Moved(after)))
		if float64(beforeMax) <= mean*1.1 {
			if ok {
				t.Errorf("%d members: balanced within 10%% already, and still a plan %v", n, plan)
			}
			continue
		}
		if !ok || plan.Version != 1 {
			t.Fatalf("%d members: largest load %d over a mean of %.0f: plan %v, %v", n, beforeMax, mean, plan, ok)
		}
		// Slots weigh 100 or more: within half the tolerance plus one slot.
		if float64(afterMax) > mean*1.05+100 {
			t.Errorf("%d members: largest load %d after the plan, mean %.0f", n, afterMax, mean)
		}
		if moved := len(before.Moved(after)); moved > s.Slots()/8 || moved != len(plan.Moves) {
			t.Errorf("%d members: %d slots moved, plan %d moves (at most %d)", n, moved, len(plan.Moves), s.Slots()/8)
		}
		if again, ok := Balance(s, members, plan, loads, 0.1, s.Slots()/8); ok {
			t.Errorf("%d members: the same loads make another plan: %v", n, again)
		}
	}
}

// TestBalanceLeavesSlotsHeavierThanTheGap: a slot that would only swap
// which member is over stays where it is, so plans never move a slot back
// and forth under unchanged loads.
func TestBalanceLeavesSlotsHeavierThanTheGap(t *testing.T) {
	s := space(t, 16)
	members := []string{"a", "b"}
	a := Assign(s, members)
	loads := make([]int64, 16)
	// One slot of each member's weighs 10; a's holds 10 more in a second
	// slot of 10: a=20, b=10. Moving a slot of 10 makes a=10, b=20: no
	// better, so no plan.
	var aSlots, bSlots []int
	for slot := range 16 {
		if a.Owner(slot) == "a" {
			aSlots = append(aSlots, slot)
		} else {
			bSlots = append(bSlots, slot)
		}
	}
	loads[aSlots[0]], loads[aSlots[1]], loads[bSlots[0]] = 10, 10, 10
	if p, ok := Balance(s, members, Plan{}, loads, 0.1, 8); ok {
		t.Errorf("plan %v moves a slot as heavy as the gap", FormatPlan(p))
	}
	// With a third slot of 10 on a (a=30, b=10), one moves: 20 and 20.
	loads[aSlots[2]] = 10
	p, ok := Balance(s, members, Plan{}, loads, 0.1, 8)
	if !ok || len(p.Moves) != 1 {
		t.Fatalf("a=30, b=10: plan %v, %v; want one move", FormatPlan(p), ok)
	}
	if got := AssignPlanned(s, members, p).Loads(loads); got["a"] != 20 || got["b"] != 20 {
		t.Errorf("after the plan: %v", got)
	}
}

// TestPlanKeepsJoinAndLeaveMinimal: with a plan in force, a member leaving
// moves only the slots it held, moved to it or not; a member joining takes
// only slots it wins by rendezvous hashing that the plan did not move, so
// no more than without the plan; no slot moves between members that stay.
func TestPlanKeepsJoinAndLeaveMinimal(t *testing.T) {
	s := space(t, DefaultSlots)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		n := 2 + round%4
		members := names("op-", n)
		loads := make([]int64, s.Slots())
		for i := range loads {
			loads[i] = int64(rng.IntN(200))
		}
		plan, ok := Balance(s, members, Plan{}, loads, 0.02, s.Slots()/4)
		if !ok {
			continue
		}
		planned := AssignPlanned(s, members, plan)
		// A member leaves.
		leaver := members[rng.IntN(n)]
		stay := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == leaver })
		left := AssignPlanned(s, stay, plan)
		for _, slot := range planned.Moved(left) {
			if planned.Owner(slot) != leaver {
				t.Fatalf("round %d: %s left, and slot %d moved from %s to %s", round, leaver, slot, planned.Owner(slot), left.Owner(slot))
			}
		}
		if got, want := len(planned.Moved(left)), len(planned.Owned(leaver)); got != want {
			t.Errorf("round %d: %s left holding %d slots; %d moved", round, leaver, want, got)
		}
		// A member joins.
		joined := AssignPlanned(s, append(slices.Clone(members), "joiner"), plan)
		plain := Assign(s, members).Moved(Assign(s, append(slices.Clone(members), "joiner")))
		moved := planned.Moved(joined)
		for _, slot := range moved {
			if joined.Owner(slot) != "joiner" {
				t.Fatalf("round %d: a member joined, and slot %d moved from %s to %s", round, slot, planned.Owner(slot), joined.Owner(slot))
			}
			if _, kept := plan.Moves[slot]; kept {
				t.Fatalf("round %d: slot %d, moved by the plan, went to the joiner", round, slot)
			}
		}
		if len(moved) > len(plain) {
			t.Errorf("round %d: the joiner took %d slots, %d without a plan", round, len(moved), len(plain))
		}
	}
}

// TestBalanceDropsMovesToMembersGone: a plan made for members that
// include one now gone moves nothing to it; the next plan lists only
// moves to live members, and moves that returned a slot to its
// rendezvous owner are not listed.
func TestBalanceDropsMovesToMembersGone(t *testing.T) {
	s := space(t, 64)
	members := []string{"a", "b", "c"}
	old := Plan{Version: 4, Moves: map[int]string{1: "gone", 2: "gone"}}
	a := AssignPlanned(s, members, old)
	if !slices.Equal(a.Moved(Assign(s, members)), nil) {
		t.Fatalf("moves to a member gone changed owners: %v", a.Moved(Assign(s, members)))
	}
	loads := make([]int64, 64)
	for _, slot := range a.Owned("a") {
		loads[slot] = 10
	}
	next, ok := Balance(s, members, old, loads, 0.1, 64)
	if !ok || next.Version != 5 {
		t.Fatalf("plan %v, %v; want version 5", next, ok)
	}
	for slot, m := range next.Moves {
		if m == "gone" || Assign(s, members).Owner(slot) == m {
			t.Errorf("next plan moves slot %d to %s", slot, m)
		}
	}
}

func TestPlanFormatAndParse(t *testing.T) {
	p := Plan{Version: 7, Moves: map[int]string{0: "op-b", 1: "op-b", 2: "op-b", 9: "op-a", 40: "op-b"}}
	s := FormatPlan(p)
	if want := "v=7;op-a=9;op-b=0-2,40"; s != want {
		t.Errorf("FormatPlan = %q, want %q", s, want)
	}
	got, err := ParsePlan(s, 64)
	if err != nil || got.Version != 7 || !maps.Equal(got.Moves, p.Moves) {
		t.Errorf("ParsePlan(%q) = %v, %v", s, got, err)
	}
	if got, err := ParsePlan("v=0", 64); err != nil || got.Version != 0 || len(got.Moves) != 0 {
		t.Errorf("ParsePlan(v=0) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "7", "v=-1", "v=x", "v=4611686018427387905", "v=1;op-a", "v=1;=3", "v=1;op-a=64", "v=1;op-a=3;op-b=3", "v=1;op-a=5,3", "v=1;op-a=1-x"} {
		if _, err := ParsePlan(bad, 64); err == nil {
			t.Errorf("ParsePlan(%q) accepted", bad)
		} else if !strings.HasPrefix(err.Error(), "plan ") {
			t.Errorf("ParsePlan(%q): %v", bad, err)
		}
	}
}

func TestPlanNewer(t *testing.T) {
	a := Plan{Version: 3, Moves: map[int]string{1: "op-a"}}
	b := Plan{Version: 3, Moves: map[int]string{1: "op-b"}}
	c := Plan{Version: 4}
	if !c.Newer(a) || a.Newer(c) {
		t.Error("a higher version is not newer")
	}
	if a.Newer(b) == b.Newer(a) || !b.Newer(a) {
		t.Error("two plans of one version: not exactly one newer (the larger encoding)")
	}
	if a.Newer(a) {
		t.Error("a plan is newer than itself")
	}
}
