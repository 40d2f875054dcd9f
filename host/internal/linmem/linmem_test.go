package linmem

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGrowKeepsAddressAndBytes: a mapped memory grows in place, keeps what
// was written, and refuses to grow past its maximum.
func TestGrowKeepsAddressAndBytes(t *testing.T) {
	for _, mapped := range []bool{true, false} {
		m := New(4 << 20)
		if !mapped {
			m = &Memory{max: 4 << 20} // the fallback
		} else if !m.mapped {
			t.Skip("no mmap on this platform")
		}
		a := m.Reallocate(65536)
		a[65535] = 7
		b := m.Reallocate(2 << 20)
		if len(b) != 2<<20 || b[65535] != 7 {
			t.Fatalf("mapped=%v: grow lost the bytes: len %d", mapped, len(b))
		}
		if mapped && &a[0] != &b[0] {
			t.Fatalf("mapped memory moved on grow")
		}
		if m.Reallocate(4<<20+1) != nil {
			t.Fatalf("mapped=%v: grew past the maximum", mapped)
		}
		m.Free()
		if m.Reallocate(65536) != nil {
			t.Fatalf("mapped=%v: a freed memory grew", mapped)
		}
	}
}

// TestFreeDuringCallWaitsForExit: a Free while a call runs is carried out
// by the call's Exit, so a running guest never sees its memory unmapped.
func TestFreeDuringCallWaitsForExit(t *testing.T) {
	m := New(1 << 20)
	buf := m.Reallocate(1 << 20)
	m.Enter(context.Background(), time.Time{})
	m.Free()
	buf[12345] = 1 // would fault if unmapped
	if m.released {
		t.Fatal("released during a call")
	}
	m.Exit()
	if !m.released {
		t.Fatal("not released at the call's end")
	}
}

// TestGrowStopsFaultingAtTheDeadline: past the call's deadline a grow still
// succeeds but leaves the pages to fault in on first touch.
func TestGrowStopsFaultingAtTheDeadline(t *testing.T) {
	m := New(64 << 20)
	if !m.mapped {
		t.Skip("no mmap on this platform")
	}
	m.Enter(context.Background(), time.Now().Add(-time.Second))
	if b := m.Reallocate(64 << 20); len(b) != 64<<20 {
		t.Fatalf("grow failed: %d", len(b))
	}
	if m.touched != 0 {
		t.Fatalf("faulted in %d bytes after the deadline", m.touched)
	}
	m.Exit()
	m.Enter(context.Background(), time.Time{})
	m.Reallocate(64 << 20)
	if m.touched != 64<<20 {
		t.Fatalf("faulted in %d bytes with no deadline", m.touched)
	}
	m.Exit()
	m.Free()
}

// TestGrowFaultsIn: a grow leaves its pages resident, whether the kernel
// populated them (MADV_POPULATE_WRITE) or each was touched.
func TestGrowFaultsIn(t *testing.T) {
	statm := func() int64 {
		b, err := os.ReadFile("/proc/self/statm")
		if err != nil {
			t.Skipf("no /proc/self/statm: %v", err)
		}
		f := strings.Fields(string(b))
		n, _ := strconv.ParseInt(f[1], 10, 64)
		return n * int64(os.Getpagesize())
	}
	m := New(256 << 20)
	if !m.mapped {
		t.Skip("no mmap on this platform")
	}
	defer m.Free()
	before := statm()
	m.Reallocate(64 << 20)
	if grew := statm() - before; grew < 60<<20 {
		t.Fatalf("a grow to 64 MiB left %d KiB resident (populate available: %v)", grew>>10, !populateUnsupported.Load())
	}
}
