package modulecontroller

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
)

// events records what an EventRecorder was asked to record.
type events struct{ got []string }

func (e *events) Eventf(_, _ runtime.Object, typ, reason, _, note string, args ...any) {
	e.got = append(e.got, typ+" "+reason+": "+fmt.Sprintf(note, args...))
}

func (e *events) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, typ, reason, action, note string, args ...any) {
	e.Eventf(regarding, related, typ, reason, action, note, args...)
}

// TestHealthEventsHaveOneWriter: with sharding every replica's supervisor
// runs module controllers and reports their load health; only the elected
// replica records it as an Event on the ReconcileModule, so that a
// module's SyncFailed is one Event, not one per replica.
func TestHealthEventsHaveOneWriter(t *testing.T) {
	rec := &events{}
	leading := false
	c := &Controller{recorder: rec, log: logr.Discard(), leader: func() bool { return leading },
		objects: map[string]*v1alpha1.ReconcileModule{"tck": {ObjectMeta: metav1.ObjectMeta{Name: "tck"}}}}
	failed := supervisor.HealthEvent{Module: "tck", Warning: true, Reason: supervisor.ReasonSyncFailed, Message: "kind Probe is not served"}
	c.onHealth(failed)
	if len(rec.got) != 0 {
		t.Fatalf("a replica that does not lead recorded %q", rec.got)
	}
	leading = true
	c.onHealth(failed)
	if want := "Warning SyncFailed: kind Probe is not served"; len(rec.got) != 1 || rec.got[0] != want {
		t.Fatalf("the leader recorded %q, want [%q]", rec.got, want)
	}
	c.onHealth(supervisor.HealthEvent{Module: "gone", Reason: supervisor.ReasonSynced})
	if len(rec.got) != 1 {
		t.Errorf("an Event for a module with no ReconcileModule: %q", rec.got)
	}
}
