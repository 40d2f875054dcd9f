package operator

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
)

func TestLoadFormatAndParse(t *testing.T) {
	l := load{generation: 9, slots: []int{0, 1, 2, 7}, at: 1764950400000, counts: map[int]int64{1: 40, 7: 3}}
	s := formatLoad(l)
	if want := "g=9;s=0-2,7;t=1764950400000;c=1:40,7:3"; s != want {
		t.Errorf("formatLoad = %q, want %q", s, want)
	}
	got, err := parseLoad(s, 16)
	if err != nil || got.generation != 9 || got.at != l.at || !slices.Equal(got.slots, l.slots) || !maps.Equal(got.counts, l.counts) {
		t.Errorf("parseLoad(%q) = %+v, %v", s, got, err)
	}
	if got, err := parseLoad("g=0;s=;t=0;c=", 16); err != nil || len(got.slots) != 0 || len(got.counts) != 0 {
		t.Errorf("parseLoad of nothing = %+v, %v", got, err)
	}
	// A count of a slot not counted, a negative count, one past 2^40 (sums
	// over every slot and replica must not overflow), a slot counted
	// twice, slots out of the space, and shapes that are not the
	// annotation's are refused, so that the elected replica waits rather
	// than plans on them.
	for _, bad := range []string{"", "g=1;s=0", "g=1;s=0;c=", "g=x;s=0;t=1;c=", "g=-1;s=0;t=1;c=", "g=1;s=0;t=1;c=3:1", "g=1;s=0;t=1;c=0:-1", "g=1;s=16;t=1;c=", "g=1;s=0;t=1;c=0", "g=1;s=0;t=1;c=0:1;x=2", "g=1;s=0;t=-5;c=", "g=1;s=0;t=x;c=", "g=1;s=0;c=;t=1", "g=1;s=0;t=1;c=0:1099511627777", "g=1;s=0-1;t=1;c=0:1,0:2"} {
		if _, err := parseLoad(bad, 16); err == nil {
			t.Errorf("parseLoad(%q) accepted", bad)
		} else if !strings.HasPrefix(err.Error(), "load ") {
			t.Errorf("parseLoad(%q): %v", bad, err)
		}
	}
}

// TestLoadsAtOneMoment: the elected replica plans on the loads every
// replica counted at one moment, the newest they share, whatever the
// totals did between moments (objects arriving); it waits when the
// replicas share no moment, when one has not published, and when a load
// was counted under claims the replica no longer has.
func TestLoadsAtOneMoment(t *testing.T) {
	const slots = 4
	view := membership.View{Members: []membership.Member{
		{Identity: "a", Claims: membership.Claims{Generation: 3, Slots: []int{0, 1}}, Self: true},
		{Identity: "b", Claims: membership.Claims{Generation: 5, Slots: []int{2, 3}}},
	}}
	owned := map[string][]int{"a": {0, 1}, "b": {2, 3}}
	ownedBy := func(id string) []int { return owned[id] }
	var h loadHistory
	// a counted at 1000 and 2000 (its objects doubling), b at 2000 only
	// (its count at 1000 never reached a Lease), and at 3000 a has not
	// counted yet while b has.
	h.add("a", load{generation: 3, slots: []int{0, 1}, at: 1000, counts: map[int]int64{0: 50, 1: 10}})
	if _, _, why := h.loadsAt(view, ownedBy, slots); why != "b has not published its load" {
		t.Errorf("with b's load unseen: %q", why)
	}
	h.add("b", load{generation: 5, slots: []int{2, 3}, at: 3000, counts: map[int]int64{2: 300}})
	// No moment shared: the reason names each replica's newest count,
	// so that clocks far apart can be seen.
	if _, _, why := h.loadsAt(view, ownedBy, slots); !strings.HasPrefix(why, noMoment) ||
		!strings.Contains(why, "a 1970-01-01T00:00:01Z, b 1970-01-01T00:00:03Z") || !strings.Contains(why, "clocks") {
		t.Errorf("with no moment shared: %q", why)
	}
	h.add("a", load{generation: 3, slots: []int{0, 1}, at: 2000, counts: map[int]int64{0: 100, 1: 20}})
	h.add("b", load{generation: 5, slots: []int{2, 3}, at: 2000, counts: map[int]int64{2: 200, 3: 1}})
	loads, at, why := h.loadsAt(view, ownedBy, slots)
	if why != "" || at != 2000 || !slices.Equal(loads, []int64{100, 20, 200, 1}) {
		t.Errorf("loadsAt = %v at %d, %q; want [100 20 200 1] at 2000", loads, at, why)
	}
	// Counted under claims b no longer has: wait.
	view.Members[1].Claims.Generation = 6
	if _, _, why := h.loadsAt(view, ownedBy, slots); !strings.HasPrefix(why, "slots are changing hands (b)") {
		t.Errorf("with b's claims newer than its count: %q", why)
	}
	view.Members[1].Claims.Generation = 5
	// Claims that are not what the plan in force gives: wait.
	owned["b"] = []int{2}
	if _, _, why := h.loadsAt(view, ownedBy, slots); !strings.HasPrefix(why, "slots are changing hands (b)") {
		t.Errorf("with b's claims not its plan's: %q", why)
	}
	owned["b"] = []int{2, 3}
	view.Members[1].All = true
	if _, _, why := h.loadsAt(view, ownedBy, slots); why != "b's claims do not parse" {
		t.Errorf("with b's claims unreadable: %q", why)
	}
	view.Members[1].All = false
	// Only the newest keepLoads moments are kept.
	for i := range int64(keepLoads + 2) {
		h.add("a", load{generation: 3, slots: []int{0, 1}, at: 10000 + i})
	}
	if len(h.loads["a"]) != keepLoads {
		t.Errorf("a's loads kept: %d, want %d", len(h.loads["a"]), keepLoads)
	}
	if _, ok := h.loads["a"][10000+keepLoads+1]; !ok {
		t.Error("a's newest load was not kept")
	}
	// A clock that went back: the counts of the moments it named before
	// are dropped, and the counts after it are kept (they would
	// otherwise be the oldest, trimmed at once, and no moment would ever
	// be shared again).
	h.add("a", load{generation: 3, slots: []int{0, 1}, at: 500, counts: map[int]int64{0: 7}})
	h.add("b", load{generation: 5, slots: []int{2, 3}, at: 500, counts: map[int]int64{2: 9}})
	if got := slices.Sorted(maps.Keys(h.loads["a"])); !slices.Equal(got, []int64{500}) {
		t.Errorf("a's moments after its clock went back: %v, want [500]", got)
	}
	if loads, at, why := h.loadsAt(view, ownedBy, slots); why != "" || at != 500 || !slices.Equal(loads, []int64{7, 0, 9, 0}) {
		t.Errorf("after the clocks went back: loadsAt = %v at %d, %q; want [7 0 9 0] at 500", loads, at, why)
	}
}

// TestShadowCountsCannotOffsetDifferences: the elected replica promotes a
// candidate on the sum of every replica's shadow counts, so a replica's
// published counts must never take away another's differences or errors:
// a value that does not decode, or holds a negative count, is left out
// (and reported), and a sum that would pass the largest int64 holds there
// rather than wrap negative.
func TestShadowCountsCannotOffsetDifferences(t *testing.T) {
	const module, digest = "widget", "sha256:aa"
	peers := map[string]string{
		"honest":   `{"widget":{"digest":"sha256:aa","agreements":5,"differences":2}}`,
		"negative": `{"widget":{"digest":"sha256:aa","agreements":100,"differences":-2,"candidateErrors":-1}}`,
		"garbled":  `{"widget":`,
		"other":    `{"widget":{"digest":"sha256:bb","differences":7},"gadget":{"digest":"sha256:aa","differences":9}}`,
	}
	var left []string
	bad := func(id, v string, err error) { left = append(left, id) }
	st := sumShadowCounts(peers, module, digest, bad)
	if st.Agreements != 5 || st.Differences != 2 || st.CandidateErrors != 0 {
		t.Errorf("sum = %+v, want the honest replica's 5 agreements and 2 differences alone", st)
	}
	if !slices.Equal(left, []string{"garbled", "negative"}) {
		t.Errorf("left out %v, want [garbled negative]", left)
	}

	huge := map[string]string{
		"a": `{"widget":{"digest":"sha256:aa","differences":9223372036854775807}}`,
		"b": `{"widget":{"digest":"sha256:aa","differences":1,"agreements":9223372036854775807}}`,
	}
	st = sumShadowCounts(huge, module, digest, bad)
	st.AddCounts(shadow.Stats{Differences: 1, Agreements: 1}) // the elected replica's own
	if st.Differences != math.MaxInt64 || st.Agreements != math.MaxInt64 {
		t.Errorf("sum = %+v, want both held at MaxInt64", st)
	}
}
