package supervisor

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

// kindsOf lists the kinds whose informers a module uses: its own, owned
// and read kinds.
func kindsOf(m abi.Manifest) []schema.GroupVersionKind {
	gvk := func(g abi.GroupVersionKind) schema.GroupVersionKind {
		return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
	}
	out := []schema.GroupVersionKind{gvk(m.For)}
	for _, g := range m.Owns {
		out = append(out, gvk(g))
	}
	for _, g := range m.Reads {
		out = append(out, gvk(g))
	}
	return out
}

// holdKinds counts a module's use of its kinds' informers. s.mu is held.
func (s *Supervisor) holdKinds(m abi.Manifest) {
	for _, gvk := range kindsOf(m) {
		s.kinds[gvk]++
	}
}

// releaseKinds ends a module's use of its kinds' informers, and removes
// the informers no module uses any more from the manager's cache, so that
// a removed module leaves no watch (and no cached objects) behind. s.mu is
// held.
func (s *Supervisor) releaseKinds(m abi.Manifest) {
	for _, gvk := range kindsOf(m) {
		if s.kinds[gvk]--; s.kinds[gvk] > 0 {
			continue
		}
		delete(s.kinds, gvk)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		if err := s.opts.Manager.GetCache().RemoveInformer(context.Background(), obj); err != nil {
			s.opts.Log.Info("informer of a removed module's kind not removed", "kind", gvk.String(), "error", err.Error())
		}
	}
}

// drainThenRelease ends old's use of its kinds' informers: once the drain
// of its finalizer from its objects has ended (the drain lists from those
// informers; see drainer.after), or at once when it declares none. stopped
// is closed when old's controller has stopped. s.mu is held.
func (s *Supervisor) drainThenRelease(name string, old *reconciler.Reconciler, stopped <-chan struct{}) {
	m := old.Manifest()
	release := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.releaseKinds(m)
		}
	}
	if !s.drainer.after(name, old, stopped, release) {
		s.releaseKinds(m)
	}
}
