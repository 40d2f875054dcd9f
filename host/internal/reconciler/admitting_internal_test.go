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
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	send := map[string]func(queue, client.Object){
		"create":  func(q queue, o client.Object) { h.Create(ctx, event.CreateEvent{Object: o}, q) },
		"update":  func(q queue, o client.Object) { h.Update(ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: o}, q) },
		"generic": func(q queue, o client.Object) { h.Generic(ctx, event.GenericEvent{Object: o}, q) },
		"delete":  func(q queue, o client.Object) { h.Delete(ctx, event.DeleteEvent{Object: o}, q) },
	}
	for ev, f := range send {
		for _, name := range []string{"mine", "theirs"} {
			want := 0
			if name == "mine" || ev == "delete" {
				want = 1
			}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			f(q, obj(name))
			if got := q.Len(); got != want {
				t.Errorf("%s of %s: %d queued, want %d", ev, name, got, want)
			}
			q.ShutDown()
		}
	}
}
