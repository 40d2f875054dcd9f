package reconciler

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestAdmittingQueuesOnlyAdmittedObjects: Options.Admits' handler queues
// the creates, updates and generic events (requeues) of the objects it
// admits and of no other, and every delete.
func TestAdmittingQueuesOnlyAdmittedObjects(t *testing.T) {
	obj := func(name string) client.Object {
		u := &unstructured.Unstructured{}
		u.SetNamespace("ns")
		u.SetName(name)
		return u
	}
	h := admitting{EventHandler: &handler.EnqueueRequestForObject{}, admits: func(o client.Object) bool { return o.GetName() == "mine" }}
	ctx := context.Background()
	for _, tc := range []struct {
		event string
		name  string
		send  func(workqueue.TypedRateLimitingInterface[reconcile.Request], client.Object)
		want  int
	}{
		{"create", "mine", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Create(ctx, event.CreateEvent{Object: o}, q)
		}, 1},
		{"create", "theirs", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Create(ctx, event.CreateEvent{Object: o}, q)
		}, 0},
		{"update", "mine", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: o}, q)
		}, 1},
		{"update", "theirs", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: o}, q)
		}, 0},
		{"generic", "mine", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Generic(ctx, event.GenericEvent{Object: o}, q)
		}, 1},
		{"generic", "theirs", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Generic(ctx, event.GenericEvent{Object: o}, q)
		}, 0},
		{"delete", "theirs", func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
			h.Delete(ctx, event.DeleteEvent{Object: o}, q)
		}, 1},
	} {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		tc.send(q, obj(tc.name))
		if got := q.Len(); got != tc.want {
			t.Errorf("%s of %s: %d queued, want %d", tc.event, tc.name, got, tc.want)
		}
		q.ShutDown()
	}
}
