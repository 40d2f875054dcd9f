package shadow

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestMain removes what testshare made for this process alone (a plain
// go test, outside make test).
func TestMain(m *testing.M) {
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// TestShadowQueueAndClose runs a real candidate: jobs beyond its queue are
// skipped without waiting, the jobs taken agree with the same guest's
// serving answer, and Close waits for an acquired canary call; a closed
// Shadow takes nothing.
func TestShadowQueueAndClose(t *testing.T) {
	ctx := context.Background()
	// The tests' compilation cache (testshare): compiling the widget in
	// this -race process takes seconds, and is not what is tested.
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{CompilationCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	m, err := eng.Load(ctx, "widget", testwasm.Build(t, "./widget"), engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	rules := protocol.RulesFor(m.Manifest(), protocol.Builtin, protocol.Limits{})
	decode := func(call string, owner map[string]any, n int, out []byte) (compare.Answer, error) {
		resp, err := rules.Decode(call, owner, n, out)
		if err != nil {
			return compare.Answer{}, err
		}
		r := resp.Response
		return compare.Answer{Response: &r, Kind: protocol.Success}, nil
	}
	obj := map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "generation": int64(1)}, "spec": map[string]any{"size": int64(2)}}
	req := []byte(`{"object":{"apiVersion":"examples.wasmreconcile.io/v1alpha1","kind":"Widget","metadata":{"name":"w","namespace":"ns","generation":1},"spec":{"size":2}},"now":"2026-01-01T00:00:00Z"}`)
	res, err := m.Reconcile(ctx, "serving", req)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := decode("serving", obj, len(req), res.Output)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	results := map[string]int{}
	s := New(m, decode, Options{QueueSize: 2, Observe: func(r string) { mu.Lock(); results[r]++; mu.Unlock() }})
	const n = 50
	accepted := 0
	for i := 0; i < n; i++ {
		if s.Submit(Job{Object: "ns/w", Call: "c", Owner: obj, Request: req, Serving: serving}) {
			accepted++
		}
	}
	// An acquired canary call holds Close.
	release := func() {}
	if _, rel, ok := s.Acquire(); ok {
		release = rel
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a canary call was acquired")
	default:
	}
	release()
	<-closed
	st := s.Stats()
	if st.Skipped != int64(n-accepted) || st.Skipped == 0 {
		t.Errorf("skipped %d, accepted %d of %d: the queue of 2 should have refused some", st.Skipped, accepted, n)
	}
	if st.Differences != 0 || st.CandidateErrors != 0 {
		t.Errorf("the same guest disagreed: %+v", st)
	}
	if got := st.Agreements + st.Skipped; got > n {
		t.Errorf("%d verdicts for %d jobs", got, n)
	}
	if results["skipped"] != int(st.Skipped) || results["agree"] != int(st.Agreements) {
		t.Errorf("observed %v, stats %+v", results, st)
	}
	if s.Submit(Job{}) {
		t.Error("a closed shadow took a job")
	}
	if _, _, ok := s.Acquire(); ok {
		t.Error("a closed shadow served a canary call")
	}
}
