package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"
)

// namespace holds every object the benchmark creates, unless spread
// spreads them over namespaces of their own (the sharding case).
const namespace = "bench"

// spread is how many namespaces the objects are spread over: object i
// lives in nsFor(i). 1: all in namespace.
var spread = 1

// nsFor is the namespace of object i.
func nsFor(i int) string {
	if spread <= 1 {
		return namespace
	}
	return fmt.Sprintf("%s-%03d", namespace, i%spread)
}

// watchedNamespace is the namespace readiness watches: all with spread.
func watchedNamespace() string {
	if spread <= 1 {
		return namespace
	}
	return metav1.NamespaceAll
}

var colors = []string{"blue", "red", "green", "yellow", "purple"}

// gvr is k's resource.
func (k kind) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: "v1alpha1", Resource: k.Plural}
}

// createNamespace creates the benchmark's namespaces: namespace, and
// spread more when spread is above 1.
func createNamespace(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	names := []string{namespace}
	for i := 0; spread > 1 && i < spread; i++ {
		names = append(names, nsFor(i))
	}
	for _, ns := range names {
		if _, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// createWidgets creates perKind objects of each kind, from creators
// goroutines, with valid specs of varied sizes and colors.
// createLimit, when set, paces createWidgets (-create-rate).
var createLimit *rate.Limiter

func createWidgets(ctx context.Context, dyn dynamic.Interface, kinds []kind, perKind, creators int) error {
	type job struct {
		k kind
		i int
	}
	jobs := make(chan job)
	errs := make(chan error, creators)
	var wg sync.WaitGroup
	for range creators {
		wg.Go(func() {
			for j := range jobs {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": j.k.Group + "/v1alpha1",
					"kind":       j.k.Kind,
					"metadata":   map[string]any{"name": fmt.Sprintf("w-%05d", j.i), "namespace": nsFor(j.i)},
					"spec":       map[string]any{"size": int64(j.i%10 + 1), "color": colors[j.i%len(colors)]},
				}}
				if _, err := dyn.Resource(j.k.gvr()).Namespace(nsFor(j.i)).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs <- fmt.Errorf("creating %s %s: %w", j.k.Kind, u.GetName(), err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range perKind {
		for _, k := range kinds { // interleave the kinds
			if createLimit != nil {
				if err = createLimit.Wait(ctx); err != nil {
					break feed
				}
			}
			select {
			case jobs <- job{k, i}:
			case err = <-errs:
				break feed
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// touchWidget changes the spec of the first object of k, round i: a call
// to its module, and a status to write.
func touchWidget(ctx context.Context, dyn dynamic.Interface, k kind, i int) error {
	patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, i%10+1)
	_, err := dyn.Resource(k.gvr()).Namespace(nsFor(0)).Patch(ctx, "w-00000", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("changing %s w-00000: %w", k.Kind, err)
	}
	return nil
}

// readiness counts the objects whose status says they are reconciled: the
// observed generation is the generation, the summary is the one their spec
// gives, and condition Ready is True.
type readiness struct {
	mu    sync.Mutex
	ready map[string]bool
	count atomic.Int64
}

func newReadiness() *readiness { return &readiness{ready: map[string]bool{}} }

// observe records the state of u.
func (r *readiness) observe(k kind, u *unstructured.Unstructured) {
	ok := isReady(u)
	key := k.Kind + "/" + u.GetNamespace() + "/" + u.GetName()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[key] == ok {
		return
	}
	r.ready[key] = ok
	if ok {
		r.count.Add(1)
	} else {
		r.count.Add(-1)
	}
}

func isReady(u *unstructured.Unstructured) bool {
	gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if gen != u.GetGeneration() {
		return false
	}
	size, found, _ := unstructured.NestedInt64(u.Object, "spec", "size")
	if !found {
		size = 1
	}
	color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
	if color == "" {
		color = "grey"
	}
	if summary, _, _ := unstructured.NestedString(u.Object, "status", "summary"); summary != fmt.Sprintf("%d x %s", size, color) {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// watchReadiness watches the objects of k from now on (they do not exist
// yet) and records their readiness in r until ctx ends. It returns once the
// watch is established.
func watchReadiness(ctx context.Context, dyn dynamic.Interface, k kind, r *readiness) error {
	res := dyn.Resource(k.gvr()).Namespace(watchedNamespace())
	list, err := res.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	for i := range list.Items {
		r.observe(k, &list.Items[i])
	}
	lw := &watchFunc{func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return res.Watch(ctx, opts)
	}}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), lw)
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if u, isU := ev.Object.(*unstructured.Unstructured); isU && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					r.observe(k, u)
				}
			}
		}
	}()
	return nil
}

// watchFunc is a cache.WatcherWithContext from a function.
type watchFunc struct {
	f func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func (w *watchFunc) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return w.f(ctx, opts)
}

// describe returns the status of k's first object and who wrote its status
// (the managedFields entries of the status subresource), so that a run
// shows that both controllers write the same status the same way.
func describe(ctx context.Context, dyn dynamic.Interface, k kind) string {
	u, err := dyn.Resource(k.gvr()).Namespace(nsFor(0)).Get(ctx, "w-00000", metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	status, _ := json.Marshal(u.Object["status"])
	var writers []string
	for _, m := range u.GetManagedFields() {
		if m.Subresource == "status" {
			writers = append(writers, fmt.Sprintf("%s (%s)", m.Manager, m.Operation))
		}
	}
	return fmt.Sprintf("%s %s: status %s written by %s", k.Kind, u.GetName(), status, strings.Join(writers, ", "))
}
