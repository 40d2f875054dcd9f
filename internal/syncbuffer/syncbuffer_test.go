package syncbuffer

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWritesAllLand: writes from many goroutines while another
// reads all end up in the buffer whole; Tail keeps the end.
func TestConcurrentWritesAllLand(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.Tail(10)
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
	b.Write([]byte("the end"))
	if got := b.Tail(3); got != "end" {
		t.Fatalf("Tail(3) = %q", got)
	}
	if got := (&Buffer{}).Tail(3); got != "" {
		t.Fatalf("empty Tail = %q", got)
	}
}
