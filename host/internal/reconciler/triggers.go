package reconciler

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

// TriggerIndexPrefix prefixes a trigger's field path to name the cache
// index of the reconciled kind by that field (abi.Trigger.Field).
const TriggerIndexPrefix = "wasmreconcile.io/trigger-field:"

// A trigger (abi.Trigger) maps an event of a related object, of a kind the
// module reads, to the reconciled objects to call again. The mapping runs
// on the informer's goroutine and reads only the informer cache: the
// reconciled kind's field index for Field, a list of the reconciled kind
// in the related object's namespace for Selector and All, the related
// object itself for OwnerReference. Each object it enqueues forgets its
// memo first (unchanged.go), so the call is never answered as unchanged:
// the related object is not part of what the memo compares.
type trigger struct {
	r         *Reconciler
	num       int // its index in the manifest's triggers
	t         abi.Trigger
	cache     cache.Cache                        // indexes the reconciled kind (Field)
	reader    client.Reader                      // lists the reconciled kind: the cache
	namespace func(related client.Object) string // where to look for reconciled objects: a namespace, or "" for all

	warnedFanOut atomic.Bool // the fan-out cap was logged
}

// newTrigger returns the trigger of t. The reconciled objects a related
// object maps to are looked for in its namespace when both kinds are
// namespaced, and in every namespace otherwise.
func (r *Reconciler) newTrigger(c cache.Cache, index int, t abi.Trigger) *trigger {
	forNS := namespaced(r.opts.Scopes, r.gvk.GroupKind())
	relNS := namespaced(r.opts.Scopes, schema.GroupKind{Group: t.Kind.Group, Kind: t.Kind.Kind})
	tr := &trigger{r: r, num: index, t: t, cache: c, reader: c, namespace: func(client.Object) string { return "" }}
	if forNS && relNS {
		tr.namespace = func(o client.Object) string { return o.GetNamespace() }
	}
	return tr
}

func namespaced(s interface {
	Namespaced(schema.GroupKind) (bool, bool)
}, gk schema.GroupKind) bool {
	ns, known := s.Namespaced(gk)
	return ns || !known // an unknown kind is taken as namespaced, as by the children rules
}

// index registers the reconciled kind's field index a Field trigger reads.
// Several modules may register the same index: the extractor is the same
// function of the same path.
func (t *trigger) index(ctx context.Context) error {
	if t.t.Field == "" {
		return nil
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(t.r.gvk)
	path := strings.Split(t.t.Field, ".")
	err := t.cache.IndexField(ctx, obj, TriggerIndexPrefix+t.t.Field, func(o client.Object) []string {
		content, ok := packed.Content(o)
		if !ok {
			return nil
		}
		return fieldNames(content, path)
	})
	if err != nil && !strings.Contains(err.Error(), "indexer conflict") {
		return fmt.Errorf("indexing %s by %s for a trigger: %w", t.r.gvk.Kind, t.t.Field, err)
	}
	return nil
}

// fieldNames returns the names at path in obj: a string, or the strings
// of a list. Anything else names nothing.
func fieldNames(obj map[string]any, path []string) []string {
	v, found, err := unstructured.NestedFieldNoCopy(obj, path...)
	if !found || err != nil {
		return nil
	}
	switch v := v.(type) {
	case string:
		if v != "" {
			return []string{v}
		}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// targets returns the reconciled objects related maps to.
func (t *trigger) targets(ctx context.Context, related client.Object) ([]types.NamespacedName, error) {
	switch {
	case t.t.OwnerReference:
		var out []types.NamespacedName
		ns := ""
		if namespaced(t.r.opts.Scopes, t.r.gvk.GroupKind()) {
			ns = related.GetNamespace()
		}
		for _, ref := range related.GetOwnerReferences() {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err == nil && gv.Group == t.r.gvk.Group && ref.Kind == t.r.gvk.Kind {
				out = append(out, types.NamespacedName{Namespace: ns, Name: ref.Name})
			}
		}
		return out, nil
	case t.t.Field != "":
		return t.list(ctx, related, client.MatchingFields{TriggerIndexPrefix + t.t.Field: related.GetName()})
	case t.t.Selector != "":
		owners, err := t.listObjects(ctx, related)
		if err != nil {
			return nil, err
		}
		path := strings.Split(t.t.Selector, ".")
		set := labels.Set(related.GetLabels())
		var out []types.NamespacedName
		for i := range owners {
			if sel := selectorAt(owners[i].Object, path); sel != nil && sel.Matches(set) {
				out = append(out, client.ObjectKeyFromObject(&owners[i]))
			}
		}
		return out, nil
	case t.t.All:
		return t.list(ctx, related)
	}
	return nil, nil
}

func (t *trigger) listObjects(ctx context.Context, related client.Object, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(t.r.gvk.GroupVersion().WithKind(t.r.gvk.Kind + "List"))
	if ns := t.namespace(related); ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := t.reader.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (t *trigger) list(ctx context.Context, related client.Object, opts ...client.ListOption) ([]types.NamespacedName, error) {
	items, err := t.listObjects(ctx, related, opts...)
	if err != nil {
		return nil, err
	}
	out := make([]types.NamespacedName, len(items))
	for i := range items {
		out[i] = client.ObjectKeyFromObject(&items[i])
	}
	return out, nil
}

// selectorAt reads the label selector at path in obj: a
// metav1.LabelSelector, or a plain map of labels. It returns nil, which
// matches nothing, for a missing, empty or malformed selector.
func selectorAt(obj map[string]any, path []string) labels.Selector {
	v, found, err := unstructured.NestedFieldNoCopy(obj, path...)
	m, ok := v.(map[string]any)
	if !found || err != nil || !ok || len(m) == 0 {
		return nil
	}
	_, hasLabels := m["matchLabels"]
	_, hasExprs := m["matchExpressions"]
	if hasLabels || hasExprs {
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
			return nil
		}
		sel, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil || sel.Empty() {
			return nil
		}
		return sel
	}
	set := labels.Set{}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		set[k] = s
	}
	sel, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return nil
	}
	return sel
}

// handler enqueues the targets of every related object an event carries
// (both sides of an update: a related object that stops matching is as
// much a change to its former owners as one that starts), at most
// Options.Policy.TriggerMaxFanOut of them, each marked as triggered (its call is
// neither damped nor counted by its owner's storm). A related object that
// fans out too often is damped by itself (sourceDamper): its further
// events are coalesced into one fan-out per Storm.Backoff.
func (t *trigger) handler() handler.EventHandler {
	fanOut := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		seen := map[types.NamespacedName]bool{}
		dropped := 0
		for _, o := range objs {
			if o == nil {
				continue
			}
			keys, err := t.targets(ctx, o)
			if err != nil {
				log.FromContext(ctx).Error(err, "trigger: finding the objects to reconcile", "module", t.r.name,
					"related", o.GetObjectKind().GroupVersionKind().Kind+" "+client.ObjectKeyFromObject(o).String())
				continue
			}
			for _, k := range keys {
				if seen[k] {
					continue
				}
				if len(seen) >= t.r.opts.Policy.TriggerMaxFanOut {
					dropped++
					continue
				}
				seen[k] = true
				t.r.objects.markTriggered(k)
				q.Add(reconcile.Request{NamespacedName: k})
			}
		}
		if dropped > 0 {
			t.r.opts.Metrics.TriggerFanOutDropped.WithLabelValues(t.r.name).Add(float64(dropped))
			if t.warnedFanOut.CompareAndSwap(false, true) {
				log.FromContext(ctx).Info("WARNING: a trigger's related object maps to more objects than --trigger-max-fanout; the rest are not reconciled for this change (counted in wasmreconcile_trigger_fanout_dropped_total); use a field or selector trigger that maps to fewer, or raise the limit",
					"module", t.r.name, "trigger", t.num, "maxFanOut", t.r.opts.Policy.TriggerMaxFanOut, "dropped", dropped)
			}
		}
	}
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], deleted bool, objs ...client.Object) {
		src := t.sourceOf(objs)
		now, delay, schedule, started := t.r.sources.admit(src, time.Now(), objs)
		if started {
			log.FromContext(ctx).Info("trigger storm: a related object changes too often; its changes now reach its owners at most once every "+t.r.sources.opts.Backoff.String()+", other changes at once",
				"module", t.r.name, "related", src)
		}
		if now {
			fanOut(ctx, q, objs...)
			if deleted {
				t.r.sources.forget(src)
			}
			return
		}
		t.r.opts.Metrics.TriggerDamped.WithLabelValues(t.r.name).Inc()
		if schedule {
			time.AfterFunc(delay, func() {
				latest := t.r.sources.fired(src, time.Now())
				if ctx.Err() != nil || len(latest) == 0 {
					return // the controller stopped
				}
				fanOut(ctx, q, latest...)
			})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.IsInInitialList {
				return // the controller's start reconciles every object anyway
			}
			enqueue(ctx, q, false, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld != nil && e.ObjectNew != nil && e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion() {
				return // a resync: nothing changed
			}
			enqueue(ctx, q, false, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, true, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, false, e.Object)
		},
	}
}

// sourceOf names the related object of an event: the trigger, the kind,
// the namespace and the name.
func (t *trigger) sourceOf(objs []client.Object) string {
	for _, o := range objs {
		if o != nil {
			return fmt.Sprintf("triggers[%d] %s %s", t.num, t.t.Kind.Kind, client.ObjectKeyFromObject(o))
		}
	}
	return fmt.Sprintf("triggers[%d]", t.num)
}
