package operator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/sharding"
)

// shards is a Host's share of the work when sharding is on.
type shards struct {
	space shard.Space
	gate  *sharding.Gate
	coord *sharding.Coordinator
	// admitted, when set (tests, through testhooks), sees every admitted
	// reconcile's key.
	admitted atomic.Pointer[func(types.NamespacedName)]
}

// newShards checks o and builds the gate and the coordinator; acquired is
// called after slots are acquired (the host requeues its objects).
func newShards(mgr manager.Manager, o ShardingOptions, acquired func()) (*shards, error) {
	if o.Identity == "" || o.Namespace == "" {
		return nil, errors.New("sharding: Identity (the pod's name) and Namespace are required")
	}
	if o.Group == "" {
		o.Group = DefaultShardGroup
	}
	if o.Slots == 0 {
		o.Slots = DefaultShardSlots
	}
	space, err := shard.NewSpace(o.Slots)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	s := &shards{space: space, gate: sharding.NewGate(space)}
	log := mgr.GetLogger().WithName("sharding")
	s.coord, err = sharding.New(membership.Options{
		Client: cs.CoordinationV1(), Namespace: o.Namespace, Group: o.Group, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		OnLost: func(err error) { log.Error(err, "every slot's work stopped") },
	}, sharding.Options{
		Space: space,
		Acquire: func(slots []int) {
			s.gate.Acquire(slots)
			acquired()
		},
		Release: func(ctx context.Context, slots []int) { _ = s.gate.Release(ctx, slots) },
		OnAssignment: func(a shard.Assignment, moved []int) {
			log.Info("assignment", "members", a.Members(), "slots", a.String(), "moved", len(moved), "mine", len(a.Owned(o.Identity)))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	log.Info("sharding by namespace, filtered in this replica (client-side)", "identity", o.Identity, "group", o.Group, "namespace", o.Namespace, "slots", o.Slots)
	return s, nil
}

// admit is the reconcilers' Shard hook: an object's namespace places it.
func (s *shards) admit(key types.NamespacedName) (func(), bool) {
	slot := s.space.SlotOf(shard.ByNamespace, key.Namespace)
	if !s.gate.Enter(slot) {
		return nil, false
	}
	if f := s.admitted.Load(); f != nil {
		(*f)(key)
	}
	return func() { s.gate.Exit(slot) }, true
}

// Start runs the coordinator in every replica (a manager runnable).
func (s *shards) Start(ctx context.Context) error {
	if err := s.coord.Run(ctx); err != nil {
		return err // the Lease was lost: the manager stops, the pod restarts
	}
	return nil
}

// NeedLeaderElection is false: every replica takes its share.
func (s *shards) NeedLeaderElection() bool { return false }
