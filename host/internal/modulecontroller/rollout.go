package modulecontroller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Rollout Event reasons.
const (
	ReasonCandidateRunning = "CandidateRunning" // spec.candidate runs in shadow
	ReasonCandidateFailed  = "CandidateFailed"  // spec.candidate could not be loaded
	ReasonPromoted         = "Promoted"         // spec.candidate was promoted automatically
	ReasonPromotionFailed  = "PromotionFailed"  // promoting it failed; it keeps running in shadow
)

// promotedIn reports whether status records the promotion of obj's
// candidate in obj's current generation: the candidate serves then, not
// spec.source.
func promotedIn(obj *v1alpha1.ReconcileModule, status *v1alpha1.ReconcileModuleStatus) bool {
	return obj.Spec.Candidate != nil && status.Rollout != nil && status.Rollout.Promoted != nil &&
		status.Rollout.Promoted.Generation == obj.Generation
}

// setCandidate starts, replaces or stops obj's candidate after a new
// generation loaded, and puts what happened in status.
func (c *Controller) setCandidate(ctx context.Context, obj *v1alpha1.ReconcileModule, status *v1alpha1.ReconcileModuleStatus, promoted bool) {
	cand := obj.Spec.Candidate
	if cand == nil || promoted {
		_, _ = c.supervisor.SetCandidate(ctx, obj.Name, nil)
		if cand == nil {
			status.Rollout = nil
		} else if status.Rollout != nil {
			status.Rollout.Candidate = nil
		}
		return
	}
	if status.Rollout == nil {
		status.Rollout = &v1alpha1.RolloutStatus{}
	}
	status.Rollout.Promoted = nil // of an earlier generation
	fail := func(err error) {
		status.Rollout.Candidate = &v1alpha1.CandidateStatus{LastError: err.Error()}
		c.event(obj, corev1.EventTypeWarning, ReasonCandidateFailed, "Shadow", "%s; the serving version is unaffected", protocol.Truncate(err.Error(), 1000))
		_, _ = c.supervisor.SetCandidate(ctx, obj.Name, nil)
	}
	fetcher, err := c.fetcher(cand.Source)
	if err != nil {
		fail(fmt.Errorf("spec.candidate.source: %w", err))
		return
	}
	opts := shadow.Options{MaxConcurrent: cand.MaxConcurrentReconciles, QueueSize: cand.QueueSize, AllowDifferences: cand.AllowDifferences}
	if cn := cand.Canary; cn != nil {
		switch {
		case cn.Selector != nil:
			sel, err := metav1.LabelSelectorAsSelector(cn.Selector)
			if err != nil {
				fail(fmt.Errorf("spec.candidate.canary.selector: %w", err))
				return
			}
			opts.Canary = &shadow.Canary{Selector: sel}
		case cn.Percent != nil:
			opts.Canary = &shadow.Canary{Percent: int(*cn.Percent)}
		}
	}
	digest, err := c.supervisor.SetCandidate(ctx, obj.Name, &supervisor.CandidateSpec{Source: fetcher, SHA256: cand.Source.SHA256, Shadow: opts})
	if err != nil {
		fail(err)
		return
	}
	prev := status.Rollout.Candidate
	status.Rollout.Candidate = &v1alpha1.CandidateStatus{Digest: digest}
	if prev == nil || prev.Digest != digest {
		if opts.Canary != nil {
			c.event(obj, corev1.EventTypeNormal, ReasonCandidateRunning, "Canary", "candidate %s serves %s; %s serves the others, shadowed by the candidate", digest, opts.Canary, status.Digest)
		} else {
			c.event(obj, corev1.EventTypeNormal, ReasonCandidateRunning, "Shadow", "candidate %s runs in shadow beside %s: called on every request, never written", digest, status.Digest)
		}
	}
}

// rollout refreshes the candidate's counts in status and promotes it when
// spec.candidate.promote says so (in the leader: only it calls
// candidates). Where status records a promotion in this generation that
// this replica does not serve (a standby that became leader, a restart),
// it serves the candidate.
func (c *Controller) rollout(ctx context.Context, obj *v1alpha1.ReconcileModule, status *v1alpha1.ReconcileModuleStatus) error {
	cand := obj.Spec.Candidate
	if cand == nil {
		return nil
	}
	if promotedIn(obj, status) {
		if st, ok := c.supervisor.Status(obj.Name); ok && st.Loaded.Digest != status.Rollout.Promoted.Digest {
			loaded, _, err := c.loadFrom(ctx, obj, cand.Source)
			if err != nil {
				return fmt.Errorf("serving the promoted candidate of ReconcileModule %s: %w", obj.Name, err)
			}
			_, _ = c.supervisor.SetCandidate(ctx, obj.Name, nil)
			status.Digest = loaded.Digest
		}
		return nil
	}
	cs, ok := c.supervisor.Candidate(obj.Name)
	if !ok {
		return nil
	}
	if status.Rollout == nil {
		status.Rollout = &v1alpha1.RolloutStatus{}
	}
	st := cs.Stats
	if c.opts.PeerShadowStats != nil {
		// Sharded: every replica shadows its own share; add them up.
		st.AddCounts(c.opts.PeerShadowStats(obj.Name, cs.Digest))
	}
	status.Rollout.Candidate = &v1alpha1.CandidateStatus{Digest: cs.Digest, Agreements: st.Agreements, Differences: st.Differences,
		CandidateErrors: st.CandidateErrors, Skipped: st.Skipped, FirstDifferences: st.FirstDifferences,
		Canary: cs.Canary, ServedByCandidate: st.ServedByCandidate, ServedByServing: st.ServedByServing}
	p := cand.Promote
	if p == nil || st.Agreements < p.AfterAgreeing || st.Differences > 0 || st.CandidateErrors > 0 || !c.leader() {
		return nil
	}
	previous := status.Digest
	loaded, _, err := c.loadFrom(ctx, obj, cand.Source)
	if err != nil {
		status.Rollout.Candidate.LastError = "promotion failed: " + err.Error()
		c.event(obj, corev1.EventTypeWarning, ReasonPromotionFailed, "Promote", "%s; the candidate keeps running in shadow", protocol.Truncate(err.Error(), 1000))
		return nil
	}
	_, _ = c.supervisor.SetCandidate(ctx, obj.Name, nil) // no-op when Apply took the candidate's code
	status.Digest = loaded.Digest
	at := metav1.NewTime(loaded.At)
	status.LoadedAt = &at
	status.Rollout.Promoted = &v1alpha1.Promotion{Digest: loaded.Digest, PreviousDigest: previous, Generation: obj.Generation,
		Agreements: st.Agreements, At: metav1.NewTime(time.Now())}
	c.event(obj, corev1.EventTypeNormal, ReasonPromoted, "Promote",
		"candidate %s promoted after %d agreeing calls (no difference, no candidate error); %s stays compiled: remove spec.candidate to roll back to it, or move the candidate's source to spec.source to keep the promotion",
		loaded.Digest, st.Agreements, previous)
	log.FromContext(ctx).Info("candidate promoted", "module", obj.Name, "digest", loaded.Digest, "previous", previous, "agreements", st.Agreements)
	return nil
}
