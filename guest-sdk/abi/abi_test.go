package abi

import "testing"

func TestPackRoundTrip(t *testing.T) {
	for _, c := range []struct{ ptr, n uint32 }{{0, 0}, {1, 2}, {0xffffffff, 0xffffffff}, {65536, 4096}} {
		b := Pack(c.ptr, c.n)
		if b.Ptr() != c.ptr || b.Len() != c.n {
			t.Errorf("Pack(%d, %d) = %#x -> (%d, %d)", c.ptr, c.n, uint64(b), b.Ptr(), b.Len())
		}
	}
	if got := uint64(Pack(1, 2)); got != 1<<32|2 {
		t.Errorf("layout: Pack(1,2) = %#x, want ptr in the high 32 bits", got)
	}
}
