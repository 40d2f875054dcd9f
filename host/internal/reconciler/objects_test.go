package reconciler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// TestObjectStateIsDroppedWhenIdle: clearing what an object never had
// creates no state; state that becomes idle is dropped; the failing count
// follows attempts; forget drops everything.
func TestObjectStateIsDroppedWhenIdle(t *testing.T) {
	s := newObjects(policy.Storm{})
	k := types.NamespacedName{Namespace: "ns", Name: "o"}
	now := time.Unix(1000, 0)
	s.forgetMemo(k)
	s.succeeded(k)
	if s.takeTriggered(k) {
		t.Fatal("an unmarked object is marked")
	}
	if ok, _ := s.admitStorm(k, fp1, now); !ok || len(s.m) != 0 {
		t.Fatalf("clearing or admitting an unknown object made state: admitted %v, %d entries", ok, len(s.m))
	}
	s.failed(k)
	s.failed(k)
	if s.attempt(k) != 2 || s.failingCount() != 1 {
		t.Fatalf("attempts %d, failing %d; want 2 and 1", s.attempt(k), s.failingCount())
	}
	s.succeeded(k)
	if s.failingCount() != 0 || len(s.m) != 0 {
		t.Fatalf("after a success: failing %d, %d entries; want none", s.failingCount(), len(s.m))
	}
	s.setFailures(k, []abi.ChildFailure{{Kind: "ConfigMap", Name: "c"}})
	s.setMemo(k, memo{digest: "d"})
	s.markTriggered(k) // drops the memo
	if _, ok := s.memoOf(k); ok || len(s.failuresOf(k)) != 1 {
		t.Fatal("a trigger mark kept the memo, or lost the child failures")
	}
	s.failed(k)
	s.forget(k)
	if len(s.m) != 0 || s.failingCount() != 0 || s.attempt(k) != 0 {
		t.Fatalf("forget left %d entries, failing %d", len(s.m), s.failingCount())
	}
}
