package operator

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestLoadFormatAndParse(t *testing.T) {
	l := load{generation: 9, slots: []int{0, 1, 2, 7}, counts: map[int]int64{1: 40, 7: 3}}
	s := formatLoad(l)
	if want := "g=9;s=0-2,7;c=1:40,7:3"; s != want {
		t.Errorf("formatLoad = %q, want %q", s, want)
	}
	got, err := parseLoad(s, 16)
	if err != nil || got.generation != 9 || !slices.Equal(got.slots, l.slots) || !maps.Equal(got.counts, l.counts) {
		t.Errorf("parseLoad(%q) = %+v, %v", s, got, err)
	}
	if got, err := parseLoad("g=0;s=;c=", 16); err != nil || len(got.slots) != 0 || len(got.counts) != 0 {
		t.Errorf("parseLoad of nothing = %+v, %v", got, err)
	}
	// A count of a slot not counted, a negative count, slots out of the
	// space, and shapes that are not the annotation's are refused, so
	// that the elected replica waits rather than plans on them.
	for _, bad := range []string{"", "g=1;s=0", "g=x;s=0;c=", "g=-1;s=0;c=", "g=1;s=0;c=3:1", "g=1;s=0;c=0:-1", "g=1;s=16;c=", "g=1;s=0;c=0", "g=1;s=0;c=0:1;x=2"} {
		if _, err := parseLoad(bad, 16); err == nil {
			t.Errorf("parseLoad(%q) accepted", bad)
		} else if !strings.HasPrefix(err.Error(), "load ") {
			t.Errorf("parseLoad(%q): %v", bad, err)
		}
	}
}
