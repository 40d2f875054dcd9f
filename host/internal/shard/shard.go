// Package shard splits a module's objects among the live replicas of the
// operator (issue 27): the API server's 64-bit FNV-1a hash of an object's
// namespace, or of its uid, falls into one of a fixed number of slots, and
// each slot has one owner among the members, chosen by rendezvous hashing.
//
// A Space is the split of the hash space into slots; an Assignment gives
// every slot of a Space to one of a set of members. Both are values: every
// replica that sees the same members computes the same Assignment, with no
// coordination beyond agreeing on the members (their Leases). An
// Assignment's UIDSelector and NamespaceSelector are the shardSelector of
// ListOptions (KEP-5866, feature gate ShardedListAndWatch) that makes the
// API server send a replica only the objects it owns.
//
// By uid, an object's slot is the top bits of the API server's hash, so
// slots are contiguous ranges of it and a member's slots merge into few
// ranges. By namespace, the top bits of the API server's hash are nearly
// the same for names that differ only at their end (FNV-1a: the last byte
// never reaches the top eight bits), so 300 namespaces named ns-0 to
// ns-299 fall into 4 of 256 slots; a namespace's slot is therefore taken
// from the hash mixed again, and the selector names the namespaces a
// member owns, each as its own one-point range. Rendezvous hashing moves
// only the slots a joining member wins, or a leaving member held: about
// 1/N of them for N members, never a slot between two members that stay
// (RATIONALE.md, "Why rendezvous hashing over a fixed number of slots?").
package shard

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Key is the object field whose hash places an object in a slot, written
// as the API server's shardRange() takes it.
type Key string

const (
	// ByNamespace places every object of a namespace in one slot: an
	// object, its children and what it reads in its namespace land on the
	// same replica. Cluster-scoped objects have the empty namespace, so
	// all of them land in the one slot that the empty string hashes to.
	ByNamespace Key = "object.metadata.namespace"
	// ByUID spreads objects evenly whatever their namespaces; an object
	// and its children may then land on different replicas.
	ByUID Key = "object.metadata.uid"
)

// ParseKey reads a Key from its short name ("namespace" or "uid") or its
// field path.
func ParseKey(s string) (Key, error) {
	switch s {
	case "namespace", string(ByNamespace):
		return ByNamespace, nil
	case "uid", string(ByUID):
		return ByUID, nil
	}
	return "", fmt.Errorf("shard key %q: want namespace or uid", s)
}

// Short is the key's short name, as ParseKey reads it: "namespace" or
// "uid".
func (k Key) Short() string {
	if k == ByUID {
		return "uid"
	}
	return "namespace"
}

const (
	// DefaultSlots is the number of slots of a Space when none is given:
	// enough that 3–16 replicas get shares within a few percent of each
	// other, few enough that a replica's selector stays short.
	DefaultSlots = 256
	// MaxSlots bounds a Space: a replica's selector has up to one range
	// per slot it owns, and the API server reads it from a URL.
	MaxSlots = 4096
)

// Space is the 64-bit hash space split into a power of two of equal
// slots; the zero Space has one slot.
type Space struct {
	bits uint // log2 of the number of slots
}

// NewSpace returns a Space of slots slots: a power of two from 1 to
// MaxSlots.
func NewSpace(slots int) (Space, error) {
	if slots < 1 || slots > MaxSlots || slots&(slots-1) != 0 {
		return Space{}, fmt.Errorf("shard slots %d: want a power of two from 1 to %d", slots, MaxSlots)
	}
	return Space{bits: uint(bits.TrailingZeros(uint(slots)))}, nil
}

// Slots is the number of slots.
func (s Space) Slots() int { return 1 << s.bits }

// Hash is the API server's hash of a field's value: 64-bit FNV-1a, as
// k8s.io/apimachinery/pkg/sharding computes it for shardRange().
func Hash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value))
	return h.Sum64()
}

// SlotOf is the slot of the object whose key field holds value: by uid
// the top bits of Hash(value), by namespace the top bits of Hash(value)
// mixed again (see the package documentation).
func (s Space) SlotOf(key Key, value string) int {
	if s.bits == 0 {
		return 0
	}
	h := Hash(value)
	if key == ByNamespace {
		h = mix(h)
	}
	return int(h >> (64 - s.bits))
}

// bound is the first hash of slot i, or 2^64 for i == Slots(), as the
// shardRange() bounds write it: 0x and 16 lowercase hex digits, or
// 0x10000000000000000.
func (s Space) bound(i int) string {
	if i >= s.Slots() {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(i)<<(64-s.bits)) // a shift of 64 (one slot) gives 0
}

// Assignment gives each slot of a Space to one member. Every replica that
// computes it from the same Space and members gets the same Assignment.
type Assignment struct {
	space   Space
	members []string // sorted, distinct
	owner   []int    // per slot: an index into members; nil with no members
}

// Assign gives each slot of space to the member with the highest
// rendezvous score for it. members may come in any order and repeat; the
// empty string is not a member.
func Assign(space Space, members []string) Assignment {
	ms := slices.Clone(members)
	ms = slices.DeleteFunc(ms, func(m string) bool { return m == "" })
	slices.Sort(ms)
	ms = slices.Compact(ms)
	a := Assignment{space: space, members: ms}
	if len(ms) == 0 {
		return a
	}
	a.owner = make([]int, space.Slots())
	seeds := make([]uint64, len(ms))
	for i, m := range ms {
		seeds[i] = Hash(m)
	}
	for slot := range a.owner {
		best, bestScore := 0, uint64(0)
		for i, seed := range seeds {
			// Ties (2^-64 apart) go to the first member in sorted order.
			if score := mix(seed ^ mix(uint64(slot)+1)); i == 0 || score > bestScore {
				best, bestScore = i, score
			}
		}
		a.owner[slot] = best
	}
	return a
}

// mix is splitmix64's finalizer: every bit of x reaches every bit of the
// result, so that a member's scores across slots are independent.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Space is the Space the Assignment splits.
func (a Assignment) Space() Space { return a.space }

// Members are the members, sorted.
func (a Assignment) Members() []string { return slices.Clone(a.members) }

// Owner is the member that owns slot, or "" with no members.
func (a Assignment) Owner(slot int) string {
	if a.owner == nil || slot < 0 || slot >= len(a.owner) {
		return ""
	}
	return a.members[a.owner[slot]]
}

// OwnerOf is the member that owns the object whose key field holds value.
func (a Assignment) OwnerOf(key Key, value string) string {
	return a.Owner(a.space.SlotOf(key, value))
}

// Owned are the slots member owns, ascending.
func (a Assignment) Owned(member string) []int {
	i, ok := slices.BinarySearch(a.members, member)
	if !ok {
		return nil
	}
	var out []int
	for slot, o := range a.owner {
		if o == i {
			out = append(out, slot)
		}
	}
	return out
}

// Moved are the slots whose owner differs between a and b, ascending. The
// Assignments must split the same Space.
func (a Assignment) Moved(b Assignment) []int {
	var out []int
	for slot := range a.space.Slots() {
		if a.Owner(slot) != b.Owner(slot) {
			out = append(out, slot)
		}
	}
	return out
}

// Range is a half-open range of the hash space, [Start, End), written as
// shardRange() takes its bounds.
type Range struct{ Start, End string }

// Ranges are the ranges of the hash space that member owns by uid,
// adjacent slots merged, ascending.
func (a Assignment) Ranges(member string) []Range {
	var out []Range
	owned := a.Owned(member)
	for i := 0; i < len(owned); {
		j := i + 1
		for j < len(owned) && owned[j] == owned[j-1]+1 {
			j++
		}
		out = append(out, Range{Start: a.space.bound(owned[i]), End: a.space.bound(owned[j-1] + 1)})
		i = j
	}
	return out
}

// UIDSelector is the shardSelector (ListOptions.ShardSelector) that makes
// the API server send only the objects member owns by uid. all is true,
// and the selector empty, when member owns every slot: a list then needs
// no selector. A member that owns no slot gets the empty selector and all
// false: it must not list at all.
func (a Assignment) UIDSelector(member string) (sel string, all bool) {
	ranges := a.Ranges(member)
	if len(ranges) == 1 && ranges[0] == (Range{Start: a.space.bound(0), End: a.space.bound(a.space.Slots())}) {
		return "", true
	}
	return joinRanges(ByUID, ranges), false
}

// NamespaceSelector is the shardSelector that makes the API server send
// only the objects of the namespaces, among namespaces, that member owns
// (cluster-scoped objects, of the empty namespace, included when member
// owns ""): one one-point range per namespace's hash. It is empty when
// member owns none of them: it must not list at all. A selector has room
// for about a thousand namespaces (MaxSelectorNamespaces).
func (a Assignment) NamespaceSelector(member string, namespaces []string) string {
	sel, _ := a.space.NamespaceSelector(namespaces, func(slot int) bool { return a.Owner(slot) == member })
	return sel
}

// MaxSelectorNamespaces is how many namespaces a shardSelector may name:
// the API server parses at most 100,000 characters of a selector, and a
// one-point range takes 72.
const MaxSelectorNamespaces = 1000

// NamespaceSelector is the shardSelector of the namespaces, among
// namespaces, whose slot in says true: one one-point range per
// namespace's hash, ascending. It returns how many namespaces it names;
// the selector is empty when it names none (it must not be used to list,
// it would list everything).
func (s Space) NamespaceSelector(namespaces []string, in func(slot int) bool) (string, int) {
	var ranges []Range
	seen := map[uint64]bool{}
	for _, ns := range namespaces {
		if !in(s.SlotOf(ByNamespace, ns)) {
			continue
		}
		h := Hash(ns)
		if seen[h] {
			continue
		}
		seen[h] = true
		end := "0x10000000000000000"
		if h != ^uint64(0) {
			end = fmt.Sprintf("0x%016x", h+1)
		}
		ranges = append(ranges, Range{Start: fmt.Sprintf("0x%016x", h), End: end})
	}
	slices.SortFunc(ranges, func(x, y Range) int { return strings.Compare(x.Start, y.Start) })
	return joinRanges(ByNamespace, ranges), len(ranges)
}

// joinRanges joins ranges into a shardSelector on key.
func joinRanges(key Key, ranges []Range) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = fmt.Sprintf("shardRange(%s, '%s', '%s')", key, r.Start, r.End)
	}
	return strings.Join(parts, " || ")
}

// String lists each member with its number of slots, for logs.
func (a Assignment) String() string {
	if len(a.members) == 0 {
		return "no members"
	}
	counts := make([]int, len(a.members))
	for _, o := range a.owner {
		counts[o]++
	}
	parts := make([]string, len(a.members))
	for i, m := range a.members {
		parts[i] = m + "=" + strconv.Itoa(counts[i])
	}
	return fmt.Sprintf("%d slots: %s", a.space.Slots(), strings.Join(parts, " "))
}
