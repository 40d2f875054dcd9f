package supervisor

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
)

// dropEvents is an Event recorder that drops them.
type dropEvents struct{}

func (dropEvents) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}
func (dropEvents) AnnotatedEventf(runtime.Object, runtime.Object, map[string]string, string, string, string, string, ...any) {
}

// rolloutFixture is a module serving the echo guest (host/engine's
// testdata: a Gadget reconciler), and a rollout whose requeues are
// counted.
type rolloutFixture struct {
	t        *testing.T
	engine   *engine.Engine
	echo     []byte
	ro       *rollout
	r        *running
	requeues int
	wg       sync.WaitGroup
}

func newRolloutFixture(t *testing.T) *rolloutFixture {
	t.Helper()
	echo, err := os.ReadFile("../../engine/testdata/echo.wasm")
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter: these tests call no guest, and it loads at once.
	e, err := engine.New(engine.Options{Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &rolloutFixture{t: t, engine: e, echo: echo}
	f.ro = &rollout{metrics: m, goroutines: &f.wg, requeueAll: func(*running) { f.requeues++ }}
	serving := f.version(echo)
	slot := versionslot.NewSlot(serving)
	rec, err := reconciler.New(reconciler.Options{Slot: slot, Client: fake.NewClientBuilder().Build(), Recorder: dropEvents{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	f.r = &running{rec: rec, slot: slot, versions: []*cached{{key: "serving", version: serving}}}
	return f
}

// version loads wasm as a new version.
func (f *rolloutFixture) version(wasm []byte) *versionslot.Version {
	f.t.Helper()
	m, err := f.engine.Load(context.Background(), "echo", wasm, engine.Limits{})
	if err != nil {
		f.t.Fatal(err)
	}
	return versionslot.New(m)
}

// candidate returns a candidate on v under key.
func (f *rolloutFixture) candidate(key string, v *versionslot.Version, canary *shadow.Canary) *candidate {
	return &candidate{key: key, digest: "sha256:" + key, version: v, opts: shadow.Options{Canary: canary}}
}

// settle waits for the rollout's goroutines: shadows stopped, versions
// retired.
func (f *rolloutFixture) settle() { f.wg.Wait() }

// TestRolloutEndings: each way a candidate ends leaves no candidate and
// no shadow on the reconciler, closes the candidate's version only when
// nothing serves or keeps it, and hands a canary's objects back only when
// it is dropped.
func TestRolloutEndings(t *testing.T) {
	for _, c := range []struct {
		name         string
		how          ending
		servingIsIt  bool // the version about to serve is the candidate's
		kept         bool // the module keeps the candidate's version
		wantClosed   bool
		wantRequeues int // of a canary, after the one install makes
	}{
		{"dropped", dropped, false, false, true, 1},
		{"dropped but kept", dropped, false, true, false, 1},
		{"closing", closing, false, false, true, 0},
		{"restarted", restarted, false, false, true, 0},
		{"restarted onto it", restarted, true, false, false, 0},
		{"promoted", promoted, true, false, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newRolloutFixture(t)
			v := f.version(f.echo)
			cand := f.candidate("c", v, &shadow.Canary{Percent: 10})
			if err := f.ro.install("echo", f.r, cand, f.r.slot.Current()); err != nil {
				t.Fatal(err)
			}
			if f.r.candidate != cand || f.r.rec.Shadow() != cand.shadow || f.requeues != 1 {
				t.Fatalf("after install: candidate %v, shadow set %v, requeues %d (a canary's objects change hands at once)",
					f.r.candidate == cand, f.r.rec.Shadow() == cand.shadow, f.requeues)
			}
			if st, ok := f.ro.status(f.r); !ok || st.Digest != "sha256:c" || st.Canary != "10% of objects" {
				t.Errorf("status %+v, %v", st, ok)
			}
			if c.kept {
				f.r.versions = append(f.r.versions, &cached{key: "c", version: v})
			}
			var serving *versionslot.Version
			if c.servingIsIt {
				serving = v
			}
			f.ro.end(f.r, c.how, serving)
			f.settle()
			if f.r.candidate != nil || f.r.rec.Shadow() != nil {
				t.Errorf("after end: candidate %v, shadow %v", f.r.candidate, f.r.rec.Shadow())
			}
			if _, ok := f.ro.status(f.r); ok {
				t.Error("status reports a candidate after it ended")
			}
			if v.Closed() != c.wantClosed {
				t.Errorf("candidate's version closed %v, want %v", v.Closed(), c.wantClosed)
			}
			if got := f.requeues - 1; got != c.wantRequeues {
				t.Errorf("%d requeues at the end, want %d", got, c.wantRequeues)
			}
			if f.r.slot.Current().Closed() {
				t.Error("the serving version was closed")
			}
			f.ro.end(f.r, c.how, serving) // no candidate: nothing happens
			if f.requeues-1 != c.wantRequeues {
				t.Error("ending with no candidate requeued")
			}
		})
	}
}

// TestRolloutReplace: a new candidate replaces the one before; the one
// before's version is closed unless the new one runs on it; a
// non-canary replacing a non-canary moves no object.
func TestRolloutReplace(t *testing.T) {
	f := newRolloutFixture(t)
	serving := f.r.slot.Current()
	v1 := f.version(f.echo)
	a := f.candidate("a", v1, nil)
	if err := f.ro.install("echo", f.r, a, serving); err != nil {
		t.Fatal(err)
	}
	b := f.candidate("a", v1, nil) // the same bytes, other options: the same version
	b.opts.MaxConcurrent = 3
	if f.ro.current(f.r, b) {
		t.Error("a candidate with other options is reported current")
	}
	if f.ro.compiled(f.r, "a") != v1 {
		t.Error("the running candidate's version is not found by its key")
	}
	if err := f.ro.install("echo", f.r, b, serving); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if v1.Closed() {
		t.Error("the version the new candidate runs on was closed with the one before")
	}
	if !f.ro.current(f.r, b) || f.ro.current(f.r, f.candidate("a", nil, nil)) {
		t.Error("current: the running candidate is not current, or one with other options is")
	}
	v2 := f.version(f.echo)
	c := f.candidate("b", v2, nil)
	if err := f.ro.install("echo", f.r, c, serving); err != nil {
		t.Fatal(err)
	}
	f.settle()
	if !v1.Closed() {
		t.Error("the replaced candidate's own version was not closed")
	}
	if f.requeues != 0 {
		t.Errorf("%d requeues with no canary", f.requeues)
	}
	if f.ro.compiled(f.r, "serving") != serving || f.ro.compiled(f.r, "none") != nil {
		t.Error("compiled does not find the kept version by its key, or finds one for an unknown key")
	}
	f.ro.end(f.r, closing, nil)
	f.settle()
}

// TestRolloutRefusesAnotherModule: a candidate reconciling another kind
// is refused, and the running candidate stays.
func TestRolloutRefusesAnotherModule(t *testing.T) {
	f := newRolloutFixture(t)
	serving := f.r.slot.Current()
	a := f.candidate("a", f.version(f.echo), nil)
	if err := f.ro.install("echo", f.r, a, serving); err != nil {
		t.Fatal(err)
	}
	other := bytes.Replace(f.echo, []byte(`"kind":"Gadget"`), []byte(`"kind":"Gizmos"`), 1)
	if bytes.Equal(other, f.echo) {
		t.Fatal("the echo guest's manifest no longer names Gadget: update the test")
	}
	b := f.candidate("b", f.version(other), nil)
	err := f.ro.install("echo", f.r, b, serving)
	if err == nil || !strings.Contains(err.Error(), "reconciled kind changed") || !strings.Contains(err.Error(), "a candidate must be the same module") {
		t.Errorf("a candidate of another kind: %v", err)
	}
	if f.r.candidate != a || f.r.rec.Shadow() != a.shadow {
		t.Error("a refused candidate replaced the running one")
	}
	f.ro.end(f.r, closing, nil)
	f.settle()
	_ = b.version.Retire(context.Background())
}
