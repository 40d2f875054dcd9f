package versionslot

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake returns a version whose module close is counted.
func fake(closes *atomic.Int32) *Version {
	return &Version{closeModule: func(context.Context) error { closes.Add(1); return nil }, idle: make(chan struct{})}
}

// waitFor polls cond; it is a positive barrier, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSwapLetsRunningCallsFinish(t *testing.T) {
	var closes atomic.Int32
	v1, v2 := fake(&closes), fake(&closes)
	s := NewSlot(v1)
	running, ok := s.Acquire() // a call in flight on v1
	if !ok || running != v1 {
		t.Fatal("Acquire did not return the current version")
	}
	old, err := s.Swap(v2)
	if err != nil || old != v1 {
		t.Fatalf("Swap = %v, %v; want v1", old, err)
	}
	if got, _ := s.Acquire(); got != v2 {
		t.Fatal("a call after the swap did not get the new version")
	} else {
		got.Release()
	}
	retired := make(chan error, 1)
	go func() { retired <- old.Retire(context.Background()) }()
	// Once Retire has begun, it can only return after the running call
	// releases v1: so it must not have returned now.
	waitFor(t, "Retire to begin", old.Retiring)
	select {
	case <-retired:
		t.Fatal("Retire returned while a call still held the version")
	default:
	}
	if old.Closed() || closes.Load() != 0 {
		t.Fatal("the module was closed under a running call")
	}
	running.Release()
	if err := <-retired; err != nil {
		t.Fatal(err)
	}
	if !old.Closed() || closes.Load() != 1 {
		t.Fatalf("closed %v, closes %d; want the module closed once", old.Closed(), closes.Load())
	}
	if err := old.Retire(context.Background()); err != nil || closes.Load() != 1 {
		t.Error("retiring twice closed twice")
	}
}

func TestClosedSlotRefusesAtOnce(t *testing.T) {
	var closes atomic.Int32
	v := fake(&closes)
	s := NewSlot(v)
	if got := s.Close(); got != v {
		t.Fatal("Close did not return the current version")
	}
	if got, ok := s.Acquire(); ok || got != nil {
		t.Fatal("a closed slot handed out a version")
	}
	if _, err := s.Swap(fake(&closes)); !errors.Is(err, ErrClosed) {
		t.Errorf("Swap on a closed slot: %v", err)
	}
	if s.Current() != nil {
		t.Error("a closed slot has a current version")
	}
}

func TestRetiredCurrentIsNotHandedOut(t *testing.T) {
	var closes atomic.Int32
	v := fake(&closes)
	s := NewSlot(v)
	if err := v.Retire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Acquire(); ok {
		t.Fatal("Acquire returned a retired version")
	}
}

func TestRetireGivesUpWithItsContext(t *testing.T) {
	var closes atomic.Int32
	v := fake(&closes)
	s := NewSlot(v)
	held, _ := s.Acquire()
	s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := v.Retire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Retire with a done context: %v", err)
	}
	if closes.Load() != 0 {
		t.Fatal("closed under a running call")
	}
	held.Release() // the last call closes it
	waitFor(t, "the module to close after the last call", func() bool { return closes.Load() == 1 })
}

// TestHammer swaps and retires versions while many goroutines call: no call
// ever runs on a closed module, and every retired module is closed once.
func TestHammer(t *testing.T) {
	const versions = 50
	var closes atomic.Int32
	var misuse atomic.Int32
	vs := make([]*Version, versions)
	for i := range vs {
		i := i
		vs[i] = &Version{idle: make(chan struct{})}
		vs[i].closeModule = func(context.Context) error {
			if vs[i].Calls() != 0 {
				misuse.Add(1)
			}
			closes.Add(1)
			return nil
		}
	}
	s := NewSlot(vs[0])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, ok := s.Acquire()
				if !ok {
					return
				}
				if v.Closed() {
					misuse.Add(1)
				}
				v.Release()
			}
		}()
	}
	var retires sync.WaitGroup
	for i := 1; i < versions; i++ {
		old, err := s.Swap(vs[i])
		if err != nil {
			t.Fatal(err)
		}
		retires.Add(1)
		go func() { defer retires.Done(); _ = old.Retire(context.Background()) }()
	}
	close(stop)
	last := s.Close()
	wg.Wait()
	_ = last.Retire(context.Background())
	retires.Wait()
	if misuse.Load() != 0 {
		t.Fatalf("%d calls ran on a closed module", misuse.Load())
	}
	if closes.Load() != versions {
		t.Fatalf("%d modules closed, want %d", closes.Load(), versions)
	}
}
