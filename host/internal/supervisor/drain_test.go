package supervisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

var gadgetKind = schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Gadget"}

// pass is one answer of a fakeHolder's DrainFinalizer.
type pass struct {
	released, remaining int
	err                 error
}

// fakeHolder is a module that left: each DrainFinalizer call reports on
// calls, then waits for its answer on answers (or its context's end).
type fakeHolder struct {
	finalizer string
	calls     chan struct{}
	answers   chan pass
}

func newFakeHolder() *fakeHolder {
	return &fakeHolder{finalizer: "test.wasmreconcile.io/cleanup", calls: make(chan struct{}, 16), answers: make(chan pass)}
}

func (f *fakeHolder) Finalizer() string             { return f.finalizer }
func (f *fakeHolder) Kind() schema.GroupVersionKind { return gadgetKind }
func (f *fakeHolder) DrainFinalizer(ctx context.Context) (int, int, error) {
	f.calls <- struct{}{}
	select {
	case p := <-f.answers:
		return p.released, p.remaining, p.err
	case <-ctx.Done():
		return 0, 1, ctx.Err()
	}
}

// answer waits for the next pass and gives it p.
func (f *fakeHolder) answer(t *testing.T, p pass) {
	t.Helper()
	select {
	case <-f.calls:
	case <-time.After(time.Minute):
		t.Fatal("no drain pass within a minute")
	}
	f.answers <- p
}

type drainHarness struct {
	dr         *drainer
	leading    atomic.Bool
	leadChecks chan struct{} // one per leading() call
	closeAll   context.CancelFunc
	wg         sync.WaitGroup
}

func newDrainHarness(t *testing.T) *drainHarness {
	ctx, cancel := context.WithCancel(context.Background())
	h := &drainHarness{closeAll: cancel, leadChecks: make(chan struct{}, 1024)}
	h.leading.Store(true)
	h.dr = &drainer{log: logr.Discard(), closing: ctx, goroutines: &h.wg,
		leading: func() bool {
			select {
			case h.leadChecks <- struct{}{}:
			default:
			}
			return h.leading.Load()
		},
		timing: drainTiming{pass: time.Minute, backoff: time.Millisecond, maxBackoff: 4 * time.Millisecond, confirm: time.Millisecond}}
	t.Cleanup(func() { cancel(); h.wg.Wait() })
	return h
}

// start begins a drain of f for module m and returns a channel closed when
// its release runs (and counts releases).
func (h *drainHarness) start(t *testing.T, m string, f *fakeHolder, stopped <-chan struct{}) (released <-chan struct{}, count *atomic.Int32) {
	t.Helper()
	ch, n := make(chan struct{}), &atomic.Int32{}
	if !h.dr.after(m, f, stopped, func() {
		if n.Add(1) == 1 {
			close(ch)
		}
	}) {
		t.Fatal("after() = false for a module with a finalizer")
	}
	return ch, n
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
}

// TestDrainerPassesUntilNothingIsLeft: a pass that released objects is
// confirmed by another; the drain ends on a pass that finds nothing, calls
// its release once, and is no longer reported.
func TestDrainerPassesUntilNothingIsLeft(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	released, n := h.start(t, "m", f, nil)
	if st, ok := h.dr.status("m"); !ok || st.Remaining != -1 || st.Finalizer != f.finalizer || st.Kind != gadgetKind {
		t.Fatalf("before the first pass: status %+v, %v; want Remaining -1 and the finalizer and kind", st, ok)
	}
	f.answer(t, pass{released: 3})
	f.answer(t, pass{released: 1}) // the confirmation finds one more
	st, _ := h.dr.status("m")
	f.answer(t, pass{})
	waitClosed(t, released, "release after the drain")
	waitClosed(t, st.Done, "Done")
	if st, ok := h.dr.status("m"); ok {
		t.Errorf("a finished drain is still reported: %+v", st)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("release called %d times, want 1", got)
	}
}

// TestDrainerRetriesAFailedPass: a failed pass is retried (with backoff),
// its remaining count reported meanwhile; a pass that finds the kind gone
// ends the drain with nothing remaining.
func TestDrainerRetriesAFailedPass(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	released, _ := h.start(t, "m", f, nil)
	f.answer(t, pass{released: 1, remaining: 2, err: errors.New("conflict")})
	// The next pass starting is the barrier: the first one's counts are in.
	select {
	case <-f.calls:
	case <-time.After(time.Minute):
		t.Fatal("a failed pass was not retried")
	}
	if st, _ := h.dr.status("m"); st.Remaining != 2 || st.Released != 1 {
		t.Errorf("after a failed pass: Remaining %d, Released %d; want 2 and 1", st.Remaining, st.Released)
	}
	st, _ := h.dr.status("m")
	f.answers <- pass{err: &meta.NoKindMatchError{GroupKind: gadgetKind.GroupKind()}}
	waitClosed(t, released, "release after the kind went")
	waitClosed(t, st.Done, "Done")
}

// TestDrainerWritesOnlyWhileLeading: a replica that does not lead makes no
// pass, however often it checks, and drains once it leads.
func TestDrainerWritesOnlyWhileLeading(t *testing.T) {
	h := newDrainHarness(t)
	h.leading.Store(false)
	f := newFakeHolder()
	released, _ := h.start(t, "m", f, nil)
	for i := 0; i < 3; i++ { // positive barrier: three checks, each answered "not leading"
		waitClosed(t, chanOf(h.leadChecks), "a leadership check")
	}
	select {
	case <-f.calls:
		t.Fatal("a replica that does not lead made a drain pass")
	default:
	}
	h.leading.Store(true)
	f.answer(t, pass{})
	waitClosed(t, released, "release once leading")
}

// TestDrainerWaitsForTheStoppedController: no pass before the old
// controller has stopped (it could add the finalizer back).
func TestDrainerWaitsForTheStoppedController(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	stopped := make(chan struct{})
	released, _ := h.start(t, "m", f, stopped)
	// A second drain of another module, started after and answered, is the
	// barrier: the drainer runs, and the first still made no pass.
	g := newFakeHolder()
	other, _ := h.start(t, "other", g, nil)
	g.answer(t, pass{})
	waitClosed(t, other, "the other module's drain")
	select {
	case <-f.calls:
		t.Fatal("a drain pass ran before the old controller stopped")
	default:
	}
	close(stopped)
	f.answer(t, pass{})
	waitClosed(t, released, "release after the controller stopped")
}

// TestDrainerCancel: a version that declares the finalizer again for the
// kind cancels the pending drain (cancelFor), which still releases; another
// kind's drain, or a manifest without the finalizer, cancels nothing.
func TestDrainerCancel(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	released, n := h.start(t, "m", f, nil)
	<-f.calls // a pass is running
	h.dr.cancelFor("m", abi.Manifest{For: abi.GroupVersionKind{Group: gadgetKind.Group, Version: gadgetKind.Version, Kind: gadgetKind.Kind}})
	h.dr.cancelFor("m", abi.Manifest{Finalizer: true, For: abi.GroupVersionKind{Group: "other.io", Version: "v1", Kind: "Gadget"}})
	h.dr.cancelFor("other", abi.Manifest{Finalizer: true, For: abi.GroupVersionKind{Group: gadgetKind.Group, Version: gadgetKind.Version, Kind: gadgetKind.Kind}})
	if st, ok := h.dr.status("m"); !ok {
		t.Fatal("the drain ended on a cancel that does not concern it")
	} else {
		select {
		case <-st.Done:
			t.Fatal("the drain ended on a cancel that does not concern it")
		default:
		}
	}
	h.dr.cancelFor("m", abi.Manifest{Finalizer: true, For: abi.GroupVersionKind{Group: gadgetKind.Group, Version: gadgetKind.Version, Kind: gadgetKind.Kind}})
	waitClosed(t, released, "release after the cancel")
	if n.Load() != 1 {
		t.Errorf("release called %d times", n.Load())
	}
}

// TestDrainerSupersedes: a second drain of the same module and kind
// cancels the first; both release.
func TestDrainerSupersedes(t *testing.T) {
	h := newDrainHarness(t)
	first, second := newFakeHolder(), newFakeHolder()
	r1, _ := h.start(t, "m", first, nil)
	<-first.calls
	r2, _ := h.start(t, "m", second, nil)
	waitClosed(t, r1, "the superseded drain's release")
	second.answer(t, pass{})
	waitClosed(t, r2, "the second drain's release")
}

// TestDrainerNothingToDrain: a module without a finalizer starts no drain
// and its release is the caller's.
func TestDrainerNothingToDrain(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	f.finalizer = ""
	called := false
	if h.dr.after("m", f, nil, func() { called = true }) {
		t.Error("after() = true for a module without a finalizer")
	}
	if called {
		t.Error("release called for a module without a finalizer")
	}
	if _, ok := h.dr.status("m"); ok {
		t.Error("a drain is reported for a module without a finalizer")
	}
}

// TestDrainerClosing: closing ends every drain, mid-pass, and the drains'
// goroutines.
func TestDrainerClosing(t *testing.T) {
	h := newDrainHarness(t)
	f := newFakeHolder()
	released, _ := h.start(t, "m", f, nil)
	<-f.calls
	h.closeAll()
	waitClosed(t, released, "release after closing")
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	waitClosed(t, done, "the drain goroutine's end")
}

// chanOf returns a channel closed after one receive from c.
func chanOf(c <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() { <-c; close(out) }()
	return out
}
