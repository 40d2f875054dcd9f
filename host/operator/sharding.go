package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/sharding"
)

// shards is a Host's share of the work when sharding is on.
type shards struct {
	identity, group string
	space           shard.Space
	log             logr.Logger
	gate            *sharding.Gate
	coord           *sharding.Coordinator
	// probe lists Leases, for shard.Probe.
	probe func(context.Context, metav1.ListOptions) (runtime.Object, error)
	// admitted, when set (tests, through testhooks), sees every admitted
	// reconcile's key.
	admitted atomic.Pointer[func(types.NamespacedName)]
}

// newShards checks o and builds the gate and the coordinator; acquired is
// called after slots are acquired (the host requeues its objects).
func newShards(mgr manager.Manager, m *metrics.Metrics, o ShardingOptions, acquired func()) (*shards, error) {
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
	s := &shards{identity: o.Identity, group: o.Group, space: space, gate: sharding.NewGate(space)}
	s.probe = func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
		return cs.CoordinationV1().Leases(o.Namespace).List(ctx, lo)
	}
	log := mgr.GetLogger().WithName("sharding")
	s.log = log
	// given: when each slot this replica owns but does not run yet was
	// given to it, for wasmreconcile_shard_handover_seconds.
	var mu sync.Mutex
	given := map[int]time.Time{}
	s.coord, err = sharding.New(membership.Options{
		Client: cs.CoordinationV1(), Namespace: o.Namespace, Group: o.Group, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		OnLost: func(err error) { log.Error(err, "every slot's work stopped") },
	}, sharding.Options{
		Space: space,
		Log:   log,
		Acquire: func(slots []int) {
			s.gate.Acquire(slots)
			mu.Lock()
			now := time.Now()
			for _, slot := range slots {
				if t, ok := given[slot]; ok {
					m.ShardHandoverSeconds.Observe(now.Sub(t).Seconds())
					delete(given, slot)
				}
			}
			mu.Unlock()
			m.ShardSlots.Set(float64(s.gate.ActiveCount()))
			acquired()
		},
		Release: func(ctx context.Context, slots []int) {
			_ = s.gate.Release(ctx, slots)
			m.ShardSlots.Set(float64(s.gate.ActiveCount()))
		},
		OnAssignment: func(a shard.Assignment, moved []int) {
			mine := a.Owned(o.Identity)
			mu.Lock()
			now := time.Now()
			for _, slot := range mine {
				if _, ok := given[slot]; !ok && !s.gate.Active(slot) {
					given[slot] = now
				}
			}
			for slot := range given {
				if a.Owner(slot) != o.Identity {
					delete(given, slot) // given elsewhere before it started here
				}
			}
			mu.Unlock()
			m.ShardMembers.Set(float64(len(a.Members())))
			m.ShardMoves.Add(float64(len(moved)))
			log.Info("assignment", "members", a.Members(), "slots", a.String(), "moved", len(moved), "mine", len(mine))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	log.Info("sharding by namespace", "identity", o.Identity, "group", o.Group, "namespace", o.Namespace, "slots", o.Slots)
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

// shardMode is how this replica's caches see other replicas' objects: today
// always client-side (every replica caches every object).
const shardMode = "client-side: every replica caches every object and reconciles those of its slots"

// ready is nil once this replica is a member of its group: until then it
// works on no slot.
func (s *shards) ready() error {
	for _, m := range s.coord.Membership().View().Members {
		if m.Self {
			return nil
		}
	}
	return fmt.Errorf("sharding (%s): %s is not yet a member of shard group %s (its Lease is not written yet)", shardMode, s.identity, s.group)
}

// report is /readyz/modules' sharding line.
func (s *shards) report() string {
	a := s.coord.Assignment()
	return fmt.Sprintf("sharding %s as %s: %d of %d slots worked on here; %s\n", shardMode, s.identity, s.gate.ActiveCount(), s.space.Slots(), a)
}

// Start runs the coordinator in every replica (a manager runnable), after
// logging whether the API server could filter by shard (KEP-5866): this
// version filters in the replica either way.
func (s *shards) Start(ctx context.Context) error {
	log := s.log
	if on, err := shard.Probe(ctx, shard.ByNamespace, s.probe); err != nil {
		log.Info("could not tell whether the API server filters by shard", "error", err.Error(), "mode", shardMode)
	} else {
		log.Info("sharding", "mode", shardMode, "apiServerShardedListAndWatch", on)
	}
	if err := s.coord.Run(ctx); err != nil {
		return err // the Lease was lost: the manager stops, the pod restarts
	}
	return nil
}

// NeedLeaderElection is false: every replica takes its share.
func (s *shards) NeedLeaderElection() bool { return false }
