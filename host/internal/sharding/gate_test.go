package sharding

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

func TestGate(t *testing.T) {
	s, _ := shard.NewSpace(8)
	g := NewGate(s)
	if g.Enter(3) || g.Enter(-1) || g.Enter(8) {
		t.Fatal("an inactive or unknown slot admitted work")
	}
	g.Acquire([]int{3, 4})
	if n := g.ActiveCount(); n != 2 {
		t.Fatalf("ActiveCount after acquiring 3 and 4: %d", n)
	}
	if !g.Enter(3) || !g.Active(4) || g.Active(5) {
		t.Fatal("an acquired slot refused work")
	}
	released := make(chan error, 1)
	go func() { released <- g.Release(context.Background(), []int{3}) }()
	// Release stops admitting before it waits: once work on 3 is refused,
	// the release has begun, and it must still be waiting for the Enter
	// above.
	for g.Enter(3) {
		g.Exit(3)
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) while work on the slot runs", err)
	default:
	}
	if !g.Enter(4) {
		t.Fatal("releasing slot 3 stopped slot 4")
	}
	g.Exit(4)
	g.Exit(3)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	// A release that cannot wait says so.
	g.Acquire([]int{5})
	g.Enter(5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Release(ctx, []int{5}); err == nil {
		t.Error("Release with work running and a done context returned nil")
	}
	g.Exit(5)
}

// TestGateUnderLoad: workers enter and exit while slots are released and
// acquired again; after each Release returns, no work admitted before it
// runs on its slots (-race checks the rest).
func TestGateUnderLoad(t *testing.T) {
	s, _ := shard.NewSpace(4)
	g := NewGate(s)
	g.Acquire([]int{0, 1, 2, 3})
	var mu sync.Mutex
	running := make([]int, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				slot := (w + i) % 4
				if !g.Enter(slot) {
					continue
				}
				mu.Lock()
				running[slot]++
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
				mu.Lock()
				running[slot]--
				mu.Unlock()
				g.Exit(slot)
			}
		}()
	}
	for range 200 {
		if err := g.Release(context.Background(), []int{1, 2}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n1, n2 := running[1], running[2]
		mu.Unlock()
		if n1 != 0 || n2 != 0 {
			t.Fatalf("after Release, work runs on slots 1 and 2: %d, %d", n1, n2)
		}
		g.Acquire([]int{1, 2})
	}
	close(stop)
	wg.Wait()
}
