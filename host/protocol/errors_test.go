package protocol_test

import (
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// TestChildrenError: the message counts and lists the failures, and the
// kind is InvalidResponse for a schema refusal, ApplyFailed for another
// refusal, and ChildConflict when every failure is a conflict.
func TestChildrenError(t *testing.T) {
	conflict := abi.ChildFailure{Kind: "ConfigMap", Name: "a", Reason: abi.ChildFailureConflict, Message: "ConfigMap ns/a exists"}
	forbidden := abi.ChildFailure{Kind: "Secret", Name: "b", Reason: "Forbidden", Message: "Secret ns/b: forbidden"}
	invalid := abi.ChildFailure{Kind: "CronJob", Name: "c", Reason: "Invalid", Message: "CronJob ns/c: invalid"}
	for _, tc := range []struct {
		failures []abi.ChildFailure
		kind     protocol.Kind
		message  string
	}{
		{[]abi.ChildFailure{conflict}, protocol.ChildConflict, "module[m] reconcile ns/o: a desired child not written: ConfigMap ns/a exists"},
		{[]abi.ChildFailure{conflict, forbidden}, protocol.ApplyFailed, "module[m] reconcile ns/o: 2 desired children not written: ConfigMap ns/a exists; Secret ns/b: forbidden"},
		{[]abi.ChildFailure{forbidden, invalid, conflict}, protocol.InvalidResponse, "3 desired children not written"},
	} {
		err := &protocol.ChildrenError{Module: "m", Call: "reconcile ns/o", Failures: tc.failures}
		if got := protocol.KindOf(err); got != tc.kind {
			t.Errorf("%v: kind %s, want %s", tc.failures, got, tc.kind)
		}
		if !strings.Contains(err.Error(), tc.message) {
			t.Errorf("message %q does not contain %q", err.Error(), tc.message)
		}
	}
	if !protocol.Terminal(&protocol.ChildrenError{Failures: []abi.ChildFailure{invalid}}) {
		t.Error("a schema refusal is not terminal")
	}
	if protocol.Terminal(&protocol.ChildrenError{Failures: []abi.ChildFailure{conflict}}) {
		t.Error("a conflict is terminal")
	}
}
