package supervisor

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// impersonate gives the reconciler of module spec, reconciling forKind,
// the identity of spec.ServiceAccount: its writes, and the guest's Events,
// impersonate the account; the object, its children and the guest's cache
// reads are read only where the account may read (SubjectAccessReviews,
// cached); the host's own Warnings stay the operator's, so that a refused
// write is reported even when the account may not create Events. next
// keeps the Event recorder, which releaseIdentity stops. s.mu is held.
func (s *Supervisor) impersonate(opts *reconciler.Options, next *running, spec Spec, forKind abi.GroupVersionKind) error {
	if s.opts.Identities == nil {
		ids, err := authz.NewIdentities(s.opts.Manager.GetConfig(), s.opts.Manager.GetHTTPClient(), s.opts.Manager.GetScheme(),
			s.opts.Manager.GetRESTMapper(), authz.Options{})
		if err != nil {
			return err
		}
		s.opts.Identities = ids
	}
	id, err := s.opts.Identities.Get(spec.ServiceAccount)
	if err != nil {
		return fmt.Errorf("module[%s]: %w", spec.Name, err)
	}
	host := opts.Recorder
	opts.Client = id.Reader(opts.Client, spec.Name, schema.GroupVersionKind{Group: forKind.Group, Version: forKind.Version, Kind: forKind.Kind}, host)
	opts.Writer, opts.Authorize, opts.StatusApplier = id.Writer(), id.Authorize, id.StatusApplier()
	next.events = id.Recorder(spec.Name, "wasmreconcile/"+spec.Name, host, hostReason)
	opts.Recorder = next.events
	return nil
}

// hostReason tells the host's own Warnings (a reconcile's outcome, a
// storm) from the guest's Events.
func hostReason(eventtype, reason string) bool {
	if eventtype != corev1.EventTypeWarning {
		return false
	}
	if reason == reconciler.ReasonReconcileStorm || reason == reconciler.ReasonMemoryBudgetWait {
		return true
	}
	return slices.Contains(protocol.Kinds, protocol.Kind(reason))
}

// releaseIdentity stops r's impersonating Event recorder, if any, once
// r's controller has stopped (its last reconciles may still record).
// s.mu is held.
func (s *Supervisor) releaseIdentity(r *running) {
	events, stopped := r.events, r.stopped
	if events == nil {
		return
	}
	r.events = nil
	if stopped == nil {
		events.Stop()
		return
	}
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		<-stopped
		events.Stop()
	}()
}
