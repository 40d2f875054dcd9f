package supervisor

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
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

// releaser returns the release of a drain of a module with manifest m: it
// ends the module's use of its kinds' informers (releaseKinds) once the
// drain ends, unless the supervisor has closed meanwhile.
func (s *Supervisor) releaser(m abi.Manifest) func() {
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.releaseKinds(m)
		}
	}
}
