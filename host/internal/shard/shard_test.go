package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	apisharding "k8s.io/apiserver/pkg/sharding"
)

func space(t *testing.T, slots int) Space {
	t.Helper()
	s, err := NewSpace(slots)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func TestNewSpaceRefuses(t *testing.T) {
	for _, n := range []int{0, -1, 3, 100, MaxSlots * 2} {
		if _, err := NewSpace(n); err == nil || !strings.Contains(err.Error(), "power of two") {
			t.Errorf("NewSpace(%d): %v, want a power-of-two error", n, err)
		}
	}
	for _, n := range []int{1, 2, 256, MaxSlots} {
		if s := space(t, n); s.Slots() != n {
			t.Errorf("NewSpace(%d).Slots() = %d", n, s.Slots())
		}
	}
}

func TestParseKey(t *testing.T) {
	for in, want := range map[string]Key{"namespace": ByNamespace, "uid": ByUID, "object.metadata.uid": ByUID, "object.metadata.namespace": ByNamespace} {
		if got, err := ParseKey(in); err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseKey("metadata.name"); err == nil {
		t.Error("ParseKey(metadata.name) succeeded")
	}
}

// TestHashIsTheAPIServers: the hash is k8s.io/apimachinery's, for
// shardRange(), byte for byte.
func TestHashIsTheAPIServers(t *testing.T) {
	values := append([]string{"", "default", "kube-system", "ns-ä", strings.Repeat("x", 253)}, names("team-", 200)...)
	for _, v := range values {
		if got, want := fmt.Sprintf("%016x", Hash(v)), sharding.HashField(v); got != want {
			t.Errorf("Hash(%q) = %s, the API server's %s", v, got, want)
		}
	}
}

// TestSelectorsPartitionObjects: with the API server's own parser and
// matcher as the oracle, every object matches the selector of exactly one
// member, the member that OwnerOf names, for both keys and several spaces
// and member counts.
func TestSelectorsPartitionObjects(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	objs := make([]*unstructured.Unstructured, 400)
	for i := range objs {
		o := &unstructured.Unstructured{}
		o.SetNamespace(fmt.Sprintf("ns-%d", rng.IntN(120)))
		if i%17 == 0 {
			o.SetNamespace("") // cluster-scoped
		}
		o.SetName(fmt.Sprintf("o-%d", i))
		o.SetUID(types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64()&(1<<48-1))))
		objs[i] = o
	}
	for _, slots := range []int{1, 2, 16, 256, MaxSlots} {
		for _, n := range []int{1, 2, 3, 5} {
			for _, key := range []Key{ByNamespace, ByUID} {
				a := Assign(space(t, slots), names("replica-", n))
				selectors := map[string]sharding.Selector{}
				var namespaces []string
				for _, o := range objs {
					namespaces = append(namespaces, o.GetNamespace())
				}
				for _, m := range a.Members() {
					var s string
					if key == ByUID {
						var all bool
						if s, all = a.UIDSelector(m); all {
							if n != 1 && slots != 1 {
								t.Fatalf("%d slots, %d members: %s owns all", slots, n, m)
							}
							continue
						}
					} else {
						s = a.NamespaceSelector(m, namespaces)
					}
					if s == "" {
						continue // owns nothing
					}
					parsed, err := apisharding.Parse(s)
					if err != nil {
						t.Fatalf("the API server refuses %s's selector %q: %v", m, s, err)
					}
					selectors[m] = parsed
				}
				for _, o := range objs {
					value := o.GetNamespace()
					if key == ByUID {
						value = string(o.GetUID())
					}
					owner := a.OwnerOf(key, value)
					matched := 0
					for m, sel := range selectors {
						ok, err := sel.Matches(o)
						if err != nil {
							t.Fatal(err)
						}
						if ok {
							matched++
							if m != owner {
								t.Errorf("%d slots, %d members, %s: %s/%s matches %s's selector, but OwnerOf says %s", slots, n, key, o.GetNamespace(), o.GetName(), m, owner)
							}
						}
					}
					if (len(selectors) > 0 || key == ByNamespace) && matched != 1 {
						t.Errorf("%d slots, %d members, %s: %s/%s matches %d selectors, want 1", slots, n, key, o.GetNamespace(), o.GetName(), matched)
					}
				}
			}
		}
	}
}

func TestSelectorMergesAdjacentSlots(t *testing.T) {
	a := Assign(space(t, 4), []string{"only"})
	if s, all := a.UIDSelector("only"); !all || s != "" {
		t.Errorf("the only member: %q, %v; want no selector, all", s, all)
	}
	if s, all := a.UIDSelector("stranger"); all || s != "" {
		t.Errorf("a non-member: %q, %v; want nothing", s, all)
	}
	if r := a.Ranges("only"); len(r) != 1 || r[0] != (Range{"0x0000000000000000", "0x10000000000000000"}) {
		t.Errorf("the only member's ranges: %v", r)
	}
	a = Assign(space(t, 256), names("r", 3))
	for _, m := range a.Members() {
		owned, ranges := a.Owned(m), a.Ranges(m)
		breaks := 1
		for i := 1; i < len(owned); i++ {
			if owned[i] != owned[i-1]+1 {
				breaks++
			}
		}
		if len(ranges) != breaks {
			t.Errorf("%s owns %d runs of slots in %d ranges", m, breaks, len(ranges))
		}
		s, _ := a.UIDSelector(m)
		if got := strings.Count(s, "shardRange("); got != len(ranges) {
			t.Errorf("%s's selector has %d ranges, want %d", m, got, len(ranges))
		}
	}
}

// TestAssignmentIsBalancedAndOrderFree: every replica computes the same
// Assignment whatever order it lists the members in, and each member's
// share is near 1/N.
func TestAssignmentIsBalancedAndOrderFree(t *testing.T) {
	s := space(t, DefaultSlots)
	for n := 2; n <= 16; n++ {
		members := names("wasmreconcile-operator-7d9f8-", n)
		a := Assign(s, members)
		shuffled := slices.Clone(members)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if moved := a.Moved(Assign(s, append(shuffled, members[0], ""))); len(moved) != 0 {
			t.Fatalf("%d members: the order or a repeat moved slots %v", n, moved)
		}
		want := float64(s.Slots()) / float64(n)
		total := 0
		for _, m := range a.Members() {
			got := len(a.Owned(m))
			total += got
			// A binomial share: within 3.5 standard deviations of the mean
			// (the members are fixed, so this passes or fails every run).
			variance := want * (1 - 1/float64(n))
			if d := float64(got) - want; d*d > 12.25*variance {
				t.Errorf("%d members: %s owns %d slots, want about %.0f", n, m, got, want)
			}
		}
		if total != s.Slots() {
			t.Errorf("%d members own %d slots in all, want %d", n, total, s.Slots())
		}
	}
}

// TestJoinAndLeaveMoveLittle: a joining member takes only slots it wins,
// about 1/(N+1) of them, and a leaving member's slots are the only ones
// that move; no slot moves between two members that stay.
func TestJoinAndLeaveMoveLittle(t *testing.T) {
	s := space(t, DefaultSlots)
	for n := 1; n <= 8; n++ {
		members := names("m", n)
		before := Assign(s, members)
		after := Assign(s, append(slices.Clone(members), "joiner"))
		moved := before.Moved(after)
		for _, slot := range moved {
			if after.Owner(slot) != "joiner" {
				t.Fatalf("%d members, one joins: slot %d moved from %s to %s", n, slot, before.Owner(slot), after.Owner(slot))
			}
		}
		if want := float64(s.Slots()) / float64(n+1); float64(len(moved)) < want/2 || float64(len(moved)) > want*1.6 {
			t.Errorf("%d members, one joins: %d slots moved, want about %.0f", n, len(moved), want)
		}
		// And back: the joiner leaves, exactly its slots move, to where
		// they were.
		if back := after.Moved(before); !slices.Equal(back, moved) {
			t.Errorf("the joiner leaving moves %v, want %v", back, moved)
		}
	}
	if got := Assign(s, nil).Owner(3); got != "" {
		t.Errorf("no members: slot 3 owned by %q", got)
	}
}

func TestAssignmentString(t *testing.T) {
	a := Assign(space(t, 4), []string{"b", "a"})
	if got := a.String(); !strings.HasPrefix(got, "4 slots: a=") || !strings.Contains(got, " b=") {
		t.Errorf("String() = %q", got)
	}
	if got := Assign(space(t, 4), nil).String(); got != "no members" {
		t.Errorf("String() with no members = %q", got)
	}
}

// TestNamespacesSpreadEvenly: namespaces named alike (ns-0 to ns-299,
// team-000 to team-299) spread over most slots and split about evenly
// between three members. By the API server's hash alone they would not:
// its top bits put them in a few slots, which the second half checks, so
// that the mixing cannot be dropped unnoticed.
func TestNamespacesSpreadEvenly(t *testing.T) {
	s := space(t, DefaultSlots)
	a := Assign(s, names("replica-", 3))
	for _, pattern := range []string{"ns-%d", "team-%03d", "bench-%d"} {
		slots, raw := map[int]bool{}, map[uint64]bool{}
		owners := map[string]int{}
		for i := range 300 {
			ns := fmt.Sprintf(pattern, i)
			slots[s.SlotOf(ByNamespace, ns)] = true
			raw[Hash(ns)>>56] = true
			owners[a.OwnerOf(ByNamespace, ns)]++
		}
		if len(slots) < 150 {
			t.Errorf("%s: 300 namespaces in %d of 256 slots", pattern, len(slots))
		}
		for _, m := range a.Members() {
			if owners[m] < 70 || owners[m] > 130 {
				t.Errorf("%s: %s owns %d of 300 namespaces, want about 100", pattern, m, owners[m])
			}
		}
		if len(raw) > 16 {
			t.Errorf("%s: the API server's hash spreads them over %d top bytes: the mixing may no longer be needed", pattern, len(raw))
		}
	}
}

// TestNamespaceSelectorEdges: the selector of a member that owns none of
// the namespaces is empty; one namespace, or two of one hash, give one
// range; the empty namespace (cluster-scoped objects) is a namespace too.
func TestNamespaceSelectorEdges(t *testing.T) {
	a := Assign(space(t, 16), []string{"a", "b"})
	var mine, theirs string
	for i := 0; mine == "" || theirs == ""; i++ {
		ns := fmt.Sprintf("x%d", i)
		if a.OwnerOf(ByNamespace, ns) == "a" {
			mine = ns
		} else {
			theirs = ns
		}
	}
	if got := a.NamespaceSelector("a", []string{theirs}); got != "" {
		t.Errorf("a owns none of [%s]: selector %q", theirs, got)
	}
	got := a.NamespaceSelector("a", []string{mine, theirs, mine})
	if strings.Count(got, "shardRange(") != 1 || !strings.Contains(got, fmt.Sprintf("'0x%016x'", Hash(mine))) {
		t.Errorf("a's selector over [%s %s %s]: %q", mine, theirs, mine, got)
	}
	owner := a.OwnerOf(ByNamespace, "")
	if got := a.NamespaceSelector(owner, []string{""}); !strings.Contains(got, fmt.Sprintf("'0x%016x'", Hash(""))) {
		t.Errorf("the empty namespace's owner %s: selector %q", owner, got)
	}
}
