package shard

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Plan moves slots off the members rendezvous hashing gives them to, so
// that the members' loads (the objects of their slots) come near the
// mean: hashing gives each member about 1/N of the slots, not of the
// objects, and 300 namespaces hashed into 256 slots gave three members
// 30%, 32% and 38% of them. The elected replica makes a Plan with
// Balance; every replica follows the newest it has seen (Newer).
//
// A move names its member, so membership changes keep what a Plan holds
// in place: a joining member takes only the unmoved slots it wins, a
// leaving one gives up only its own (moves to it fall back to their
// rendezvous owners among the members that stay).
type Plan struct {
	// Version orders Plans; the zero Plan moves nothing.
	Version int64
	// Moves gives each moved slot its member. A move to a member that is
	// not live is ignored.
	Moves map[int]string
}

// MaxPlanVersion is the largest Version ParsePlan accepts, so that a
// Plan can always be followed by a newer one.
const MaxPlanVersion = 1 << 62

// AssignPlanned is Assign with plan's moves to members applied.
func AssignPlanned(space Space, members []string, plan Plan) Assignment {
	a := Assign(space, members)
	if a.owner == nil {
		return a
	}
	for slot, m := range plan.Moves {
		if slot < 0 || slot >= len(a.owner) {
			continue
		}
		if i, ok := slices.BinarySearch(a.members, m); ok {
			a.owner[slot] = i
		}
	}
	return a
}

// Newer reports whether p is to be followed over q: a higher Version, or
// at the same Version (two elected replicas at once, briefly) the larger
// encoding, so that every replica picks the same.
func (p Plan) Newer(q Plan) bool {
	if p.Version != q.Version {
		return p.Version > q.Version
	}
	return FormatPlan(p) > FormatPlan(q)
}

// Loads are each member's load under a, from loads per slot.
func (a Assignment) Loads(loads []int64) map[string]int64 {
	out := make(map[string]int64, len(a.members))
	for _, m := range a.members {
		out[m] = 0
	}
	for slot, o := range a.owner {
		if slot < len(loads) {
			out[a.members[o]] += loads[slot]
		}
	}
	return out
}

// Balance returns a Plan newer than current that moves slots (at most
// maxMoves) from the most to the least loaded members until none holds
// more than the mean load by tolerance/2, and true; or current and
// false when no member holds more than the mean by tolerance (a fraction,
// 0.1 for 10%), or when no move helps. loads are the objects of each
// slot. A current of MaxPlanVersion can have no newer plan: Balance
// returns it.
//
// Each move takes, from the most loaded member, the slot whose move to
// the least loaded one lowers the larger of their two loads the most, and
// only when it lowers it: a slot heavier than their difference stays, so
// that Plans never swap a slot back and forth under unchanged loads. The
// returned Plan lists every slot whose owner differs from its rendezvous
// owner among members: moves of current to members that left are
// dropped, and a move back to the rendezvous owner ends that move.
func Balance(space Space, members []string, current Plan, loads []int64, tolerance float64, maxMoves int) (Plan, bool) {
	a := AssignPlanned(space, members, current)
	n := len(a.members)
	if n < 2 || len(loads) != len(a.owner) || maxMoves <= 0 || current.Version >= MaxPlanVersion {
		return current, false
	}
	load := make([]int64, n)
	var total int64
	for slot, o := range a.owner {
		load[o] += loads[slot]
		total += loads[slot]
	}
	mean := float64(total) / float64(n)
	if total <= 0 || float64(slices.Max(load)) <= mean*(1+tolerance) {
		return current, false
	}
	target := mean * (1 + tolerance/2)
	rendezvous := Assign(space, members)
	moved := 0
	for moved < maxMoves {
		heavy := argBy(load, func(x, y int64) bool { return x > y })
		light := argBy(load, func(x, y int64) bool { return x < y })
		if float64(load[heavy]) <= target {
			break
		}
		gap := load[heavy] - load[light]
		best, bestGain := -1, int64(0)
		for slot, o := range a.owner {
			w := loads[slot]
			if o != heavy || w <= 0 || w >= gap {
				continue
			}
			gain := min(w, gap-w)
			// Ties: a move back to the slot's rendezvous owner first, then
			// the lower slot (the loop's order).
			if gain > bestGain || (gain == bestGain && best >= 0 && rendezvous.owner[slot] == light && rendezvous.owner[best] != light) {
				best, bestGain = slot, gain
			}
		}
		if best < 0 {
			break
		}
		a.owner[best] = light
		load[heavy] -= loads[best]
		load[light] += loads[best]
		moved++
	}
	if moved == 0 {
		return current, false
	}
	next := Plan{Version: current.Version + 1, Moves: map[int]string{}}
	for slot, o := range a.owner {
		if o != rendezvous.owner[slot] {
			next.Moves[slot] = a.members[o]
		}
	}
	return next, true
}

// argBy is the first index of xs that no other beats.
func argBy(xs []int64, beats func(x, y int64) bool) int {
	best := 0
	for i, x := range xs {
		if beats(x, xs[best]) {
			best = i
		}
	}
	return best
}

// FormatPlan writes p as "v=VERSION" followed by ";MEMBER=SLOTS" for each
// member moves go to, in member order (SLOTS as FormatSlots writes them).
// Members are parts of Lease names (DNS subdomains), which hold none of
// ";=,".
func FormatPlan(p Plan) string {
	var b strings.Builder
	b.WriteString("v=")
	b.WriteString(strconv.FormatInt(p.Version, 10))
	by := map[string][]int{}
	for slot, m := range p.Moves {
		by[m] = append(by[m], slot)
	}
	for _, m := range slices.Sorted(maps.Keys(by)) {
		slots := by[m]
		slices.Sort(slots)
		b.WriteByte(';')
		b.WriteString(m)
		b.WriteByte('=')
		b.WriteString(FormatSlots(slots))
	}
	return b.String()
}

// ParsePlan reads what FormatPlan writes, for a space of slots slots.
func ParsePlan(s string, slots int) (Plan, error) {
	parts := strings.Split(s, ";")
	v, ok := strings.CutPrefix(parts[0], "v=")
	if !ok {
		return Plan{}, fmt.Errorf("plan %q: want v=VERSION;MEMBER=SLOTS…", s)
	}
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil || version < 0 || version > MaxPlanVersion {
		return Plan{}, fmt.Errorf("plan %q: version %q is not a count up to 2^62", s, v)
	}
	p := Plan{Version: version, Moves: map[int]string{}}
	for _, part := range parts[1:] {
		m, list, ok := strings.Cut(part, "=")
		if !ok || m == "" || strings.ContainsAny(m, ",=") {
			return Plan{}, fmt.Errorf("plan %q: %q: want MEMBER=SLOTS", s, part)
		}
		ss, err := ParseSlots(list, slots)
		if err != nil {
			return Plan{}, fmt.Errorf("plan %q: %s: %w", s, m, err)
		}
		for _, slot := range ss {
			if other, dup := p.Moves[slot]; dup {
				return Plan{}, fmt.Errorf("plan %q: slot %d moves to %s and %s", s, slot, other, m)
			}
			p.Moves[slot] = m
		}
	}
	return p, nil
}

// FormatSlots writes ascending slots as comma-separated N or N-M runs:
// "0-12,40".
func FormatSlots(slots []int) string {
	var b strings.Builder
	for i := 0; i < len(slots); {
		j := i + 1
		for j < len(slots) && slots[j] == slots[j-1]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(slots[i]))
		if j-1 > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(slots[j-1]))
		}
		i = j
	}
	return b.String()
}

// ParseSlots reads what FormatSlots writes: ascending, distinct slots
// below limit.
func ParseSlots(list string, limit int) ([]int, error) {
	var out []int
	if list == "" {
		return out, nil
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= limit {
			return nil, fmt.Errorf("slots %q: want N or N-M, 0 <= N <= M < %d", part, limit)
		}
		if n := len(out); n > 0 && a <= out[n-1] {
			return nil, fmt.Errorf("slots not ascending at %q", part)
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	return out, nil
}
