package reconciler

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// sendEach returns, for each kind of event, a function that sends it for
// an object through h (an update from old to the object, with old the
// object itself when nil).
func sendEach(h handler.EventHandler) map[string]func(q queue, o, old client.Object) {
	ctx := context.Background()
	return map[string]func(queue, client.Object, client.Object){
		"create": func(q queue, o, _ client.Object) { h.Create(ctx, event.CreateEvent{Object: o}, q) },
		"update": func(q queue, o, old client.Object) {
			if old == nil {
				old = o
			}
			h.Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: o}, q)
		},
		"generic": func(q queue, o, _ client.Object) { h.Generic(ctx, event.GenericEvent{Object: o}, q) },
		"delete":  func(q queue, o, _ client.Object) { h.Delete(ctx, event.DeleteEvent{Object: o}, q) },
	}
}

// queued is the number of requests one event leaves in a fresh queue.
func queued(send func(queue, client.Object, client.Object), o, old client.Object) int {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	send(q, o, old)
	return q.Len()
}

// admitsUID admits the uid "mine" in any namespace, and records what it
// was asked.
type admitsUID struct{ asked []string }

func (a *admitsUID) admits(namespace string, uid types.UID) bool {
	a.asked = append(a.asked, namespace+"/"+string(uid))
	return uid == "mine"
}

// TestAdmittingQueuesOnlyAdmittedObjects: Options.Admits' handler queues
// the creates, updates and generic events (requeues) of the objects it
// admits, placed by their own namespace and uid, and every delete.
func TestAdmittingQueuesOnlyAdmittedObjects(t *testing.T) {
	a := &admitsUID{}
	h := admitting{EventHandler: &handler.EnqueueRequestForObject{}, admits: a.admits, place: placeSelf}
	for ev, send := range sendEach(h) {
		for _, uid := range []types.UID{"mine", "theirs"} {
			u := &unstructured.Unstructured{}
			u.SetNamespace("ns")
			u.SetName("w")
			u.SetUID(uid)
			want := 0
			if uid == "mine" || ev == "delete" {
				want = 1
			}
			a.asked = nil
			if got := queued(send, u, nil); got != want {
				t.Errorf("%s of %s: %d queued, want %d", ev, uid, got, want)
			}
			if ev != "delete" && (len(a.asked) == 0 || a.asked[0] != "ns/"+string(uid)) {
				t.Errorf("%s of %s: Admits asked %v, want ns/%s first", ev, uid, a.asked, uid)
			}
		}
	}
}

// TestAdmittingQueuesOnlyAdmittedOwners: for owned children, Options.Admits'
// handler asks about the child's controller owner of the reconciled kind,
// placed as Shard places the owner's reconcile (the child's namespace, or
// none for a cluster-scoped kind, and the owner reference's uid), and
// queues the owner's request only when it admits it; a child with no such
// owner queues nothing either way; an update passes when either side's
// owner is admitted; deletes always pass.
func TestAdmittingQueuesOnlyAdmittedOwners(t *testing.T) {
	scheme := runtime.NewScheme()
	widget := schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	clusterRole := schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	static := meta.NewDefaultRESTMapper(nil)
	static.Add(widget, meta.RESTScopeNamespace)
	static.Add(clusterRole, meta.RESTScopeRoot)
	child := func(ns string, refs ...metav1.OwnerReference) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace(ns)
		u.SetName("c")
		u.SetOwnerReferences(refs)
		return u
	}
	ref := func(gvk schema.GroupVersionKind, name string, uid types.UID, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name, UID: uid, Controller: &controller}
	}
	otherVersion := widget
	otherVersion.Version = "v2"
	static.Add(otherVersion, meta.RESTScopeNamespace)
	for _, tc := range []struct {
		name      string
		owner     schema.GroupVersionKind
		obj, old  client.Object
		want      int    // requests queued by a create, update or generic event
		wantAsked string // what Admits was asked first, "" for nothing
	}{
		{"its owner admitted", widget, child("ns", ref(widget, "w", "mine", true)), nil, 1, "ns/mine"},
		{"its owner refused", widget, child("ns", ref(widget, "w", "theirs", true)), nil, 0, "ns/theirs"},
		{"its owner of another version", widget, child("ns", ref(otherVersion, "w", "mine", true)), nil, 1, "ns/mine"},
		{"no controller", widget, child("ns", ref(widget, "w", "mine", false)), nil, 0, ""},
		{"a controller of another kind", widget, child("ns", ref(clusterRole, "w", "mine", true)), nil, 0, ""},
		{"a cluster-scoped owner", clusterRole, child("ns", ref(clusterRole, "r", "mine", true)), nil, 1, "/mine"},
		{"an update from an admitted owner", widget, child("ns", ref(widget, "w2", "theirs", true)), child("ns", ref(widget, "w", "mine", true)), 2, "ns/theirs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := &unstructured.Unstructured{}
			owner.SetGroupVersionKind(tc.owner)
			enqueue := handler.EnqueueRequestForOwner(scheme, static, owner, handler.OnlyControllerOwner())
			r := &Reconciler{declared: declared{gvk: tc.owner}, opts: Options{Scopes: protocol.Builtin}}
			a := &admitsUID{}
			h := admitting{EventHandler: enqueue, admits: a.admits, place: r.placeOwner}
			for ev, send := range sendEach(h) {
				if tc.old != nil && ev != "update" {
					continue
				}
				want := tc.want
				if ev == "delete" {
					want = queued(sendEach(enqueue)["delete"], tc.obj, nil) // as unfiltered
				}
				a.asked = nil
				if got := queued(send, tc.obj, tc.old); got != want {
					t.Errorf("%s: %d queued, want %d", ev, got, want)
				}
				if ev == "delete" {
					continue
				}
				first := ""
				if len(a.asked) > 0 {
					first = a.asked[0]
				}
				if first != tc.wantAsked {
					t.Errorf("%s: Admits asked %v first, want %q", ev, a.asked, tc.wantAsked)
				}
			}
		})
	}
}
