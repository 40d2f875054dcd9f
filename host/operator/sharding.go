package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/sharding"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
)

// shards is a Host's share of the work when sharding is on.
type shards struct {
	space shard.Space
	key   shard.Key // what places an object: its namespace or its uid
	log   logr.Logger
	gate  *sharding.Gate
	coord *sharding.Coordinator
	opts  ShardingOptions

	// serverSide: the informers list and watch only this replica's share
	// (informers.Shard); otherwise every replica caches every object.
	serverSide bool
	mode       string // for the log and /readyz/modules
	informers  *informer.Informers
	cache      cache.Cache                          // for the Namespace informer, server-side
	sharded    func(schema.GroupKind) (bool, error) // server-side: whether a kind's informers hold only the share

	mu         sync.Mutex
	namespaces map[string]struct{} // that exist, server-side
	pending    map[int]bool        // slots being acquired: in the selection, not yet admitted
	tooMany    bool                // the selection named more than MaxSelectorNamespaces; logged once
	nsChanged  chan struct{}       // a namespace came or went (capacity 1)
	// probe lists Leases, for shard.Probe.
	probe func(context.Context, metav1.ListOptions) (runtime.Object, error)
	// leading reports whether this replica is the elected one, which alone
	// records rebalance Events (and does module-level work).
	leading func() bool
	// supervisor, set by Setup before Start, has the candidates whose
	// counts publishShadowCounts publishes.
	supervisor *supervisor.Supervisor
	// recorder records rebalance Events on ReconcileModules, when the
	// host serves them (reconcileModules).
	recorder         events.EventRecorder
	reconcileModules bool
	metrics          *metrics.Metrics

	// Balancing by load (balance.go): the plan this replica follows and
	// publishes, the Leases' plans that did not parse (logged once each,
	// by Lease name), and the load it publishes.
	balanceMu sync.Mutex
	plan      shard.Plan
	badPlan   map[string]string
	// badCounts are the AnnotationShadowCounts values left out, logged
	// once each, by replica.
	badCounts map[string]string
	load      string
	// freeAfter's: the newest selection to wait for, and whether a
	// goroutine waits.
	freeMu  sync.Mutex
	freeGen uint64
	freeing bool

	// stuckLogged is whether the elected replica logged a plan it cannot
	// follow with a newer one (runBalance's own).
	stuckLogged bool

	// admitted and refused, when set (tests, through testhooks), see the
	// key of every reconcile the gate admits, and refuses.
	admitted, refused atomic.Pointer[func(types.NamespacedName)]
}

// newShards checks o, decides the mode (asking the API server whether it
// filters by shard) and builds the gate and the coordinator; acquired is
// called after slots are acquired, with what places an object in them
// (the host requeues those objects).
// informers are the cache's (nil: the client-side mode only).
func newShards(mgr manager.Manager, m *metrics.Metrics, o ShardingOptions, informers *informer.Informers, reconcileModules bool, acquired func(keep func(namespace string, uid types.UID) bool)) (*shards, error) {
	if o.Identity == "" || o.Namespace == "" {
		return nil, errors.New("sharding: Identity (the pod's name) and Namespace are required")
	}
	if err := o.Validate(); err != nil {
		return nil, err
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
	key := shard.ByNamespace
	if o.Key != "" {
		if key, err = shard.ParseKey(o.Key); err != nil {
			return nil, fmt.Errorf("sharding: %w", err)
		}
	}
	if o.NamespaceDebounce <= 0 {
		o.NamespaceDebounce = DefaultShardNamespaceDebounce
	}
	if o.ReshardTimeout <= 0 {
		o.ReshardTimeout = DefaultShardReshardTimeout
	}
	if o.BalanceTolerance == 0 {
		o.BalanceTolerance = DefaultShardBalanceTolerance
	}
	if o.BalanceInterval <= 0 {
		o.BalanceInterval = DefaultShardBalanceInterval
	}
	s := &shards{space: space, key: key, gate: sharding.NewGate(space), opts: o,
		recorder: mgr.GetEventRecorder("wasmreconcile"), reconcileModules: reconcileModules,
		leading: func() bool {
			select {
			case <-mgr.Elected():
				return true
			default:
				return false
			}
		},
		namespaces: map[string]struct{}{}, pending: map[int]bool{}, nsChanged: make(chan struct{}, 1), cache: mgr.GetCache(),
		metrics: m, badPlan: map[string]string{}, badCounts: map[string]string{}}
	s.probe = func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
		return cs.CoordinationV1().Leases(o.Namespace).List(ctx, lo)
	}
	log := mgr.GetLogger().WithName("sharding")
	s.log = log
	if err := s.chooseMode(mgr, informers); err != nil {
		return nil, err
	}
	// given: when each slot this replica owns but does not run yet was
	// given to it, for wasmreconcile_shard_handover_seconds.
	var mu sync.Mutex
	given := map[int]time.Time{}
	var members []string // of the previous assignment
	s.coord, err = sharding.New(membership.Options{
		Client: cs.CoordinationV1(), Namespace: o.Namespace, Group: o.Group, Identity: o.Identity,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		OnLost:          func(err error) { log.Error(err, "every slot's work stopped") },
		Annotations:     s.publish,
		PeerAnnotations: []string{AnnotationShadowCounts, AnnotationShardLoad},
		KeptAnnotations: []string{AnnotationShardPlan},
	}, sharding.Options{
		Space:  space,
		Settle: o.Settle,
		Log:    log,
		Plan:   s.followPlan,
		Acquire: func(slots []int) {
			s.cacheShare(slots)
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
			in := make(map[int]bool, len(slots))
			for _, slot := range slots {
				in[slot] = true
			}
			acquired(func(namespace string, uid types.UID) bool { return in[s.slotOf(namespace, uid)] })
		},
		Release: func(ctx context.Context, slots []int) {
			_ = s.gate.Release(ctx, slots)
			m.ShardSlots.Set(float64(s.gate.ActiveCount()))
			s.reselect() // the cache lets the slots' objects go
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
			byLoad := slices.Equal(members, a.Members())
			members = a.Members()
			mu.Unlock()
			m.ShardMembers.Set(float64(len(a.Members())))
			m.ShardMoves.Add(float64(len(moved)))
			log.Info("assignment", "members", a.Members(), "slots", a.String(), "moved", len(moved), "mine", len(mine), "byLoad", byLoad)
			if len(moved) > 0 {
				go s.rebalanced(a, len(moved), byLoad)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	if o.agent != nil {
		gen := s.coord.Membership().ClaimsGeneration
		o.agent.generation.Store(&gen)
	}
	log.Info("sharding by "+key.Short(), "identity", o.Identity, "group", o.Group, "namespace", o.Namespace, "slots", o.Slots, "mode", s.mode)
	return s, nil
}

// AnnotationShadowCounts is the annotation of a replica's shard Lease
// that publishes its shadow comparison counts, by module (JSON,
// shadowCount): the elected replica promotes a candidate on the sum of
// every live replica's counts, since each compares only its own share.
const AnnotationShadowCounts = "wasmreconcile.io/shadow-counts"

// shadowCount is one module's candidate counts in AnnotationShadowCounts.
type shadowCount struct {
	Digest            string `json:"digest"`
	Agreements        int64  `json:"agreements,omitempty"`
	Differences       int64  `json:"differences,omitempty"`
	CandidateErrors   int64  `json:"candidateErrors,omitempty"`
	Skipped           int64  `json:"skipped,omitempty"`
	ServedByCandidate int64  `json:"servedByCandidate,omitempty"`
	ServedByServing   int64  `json:"servedByServing,omitempty"`
}

// maxPublishedCandidates bounds the modules AnnotationShadowCounts holds,
// so that the Lease stays small (a few hundred bytes each).
const maxPublishedCandidates = 200

// publishShadowCounts is membership's Annotations: this replica's
// candidates' counts, for the elected replica to add up.
func (s *shards) publishShadowCounts() map[string]string {
	if s.supervisor == nil {
		return nil
	}
	counts := map[string]shadowCount{}
	for _, name := range s.supervisor.Names() {
		if cs, ok := s.supervisor.Candidate(name); ok {
			st := cs.Stats
			counts[name] = shadowCount{Digest: cs.Digest, Agreements: st.Agreements, Differences: st.Differences, CandidateErrors: st.CandidateErrors,
				Skipped: st.Skipped, ServedByCandidate: st.ServedByCandidate, ServedByServing: st.ServedByServing}
		}
	}
	if len(counts) == 0 {
		return nil
	}
	if len(counts) > maxPublishedCandidates {
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names[maxPublishedCandidates:] {
			delete(counts, n)
		}
	}
	b, err := json.Marshal(counts)
	if err != nil {
		return nil
	}
	return map[string]string{AnnotationShadowCounts: string(b)}
}

// peerShadowStats is the sum of the other live replicas' published
// counts of module's candidate digest (the modulecontroller adds its own).
func (s *shards) peerShadowStats(module, digest string) shadow.Stats {
	return sumShadowCounts(s.coord.Membership().Peers(AnnotationShadowCounts), module, digest, func(id, v string, err error) {
		s.balanceMu.Lock()
		defer s.balanceMu.Unlock()
		if s.badCounts[id] != v {
			s.badCounts[id] = v
			s.log.Info("ignoring shadow counts that do not decode or hold a negative count", "replica", id, "error", err.Error())
		}
	})
}

// sumShadowCounts adds up the counts of module's candidate digest in
// peers (AnnotationShadowCounts by replica); a replica whose value does
// not decode, or holds a negative count, is left out and passed to bad:
// a count must never offset another replica's differences or errors,
// which hold a promotion back. The sum saturates (shadow.Stats.AddCounts).
func sumShadowCounts(peers map[string]string, module, digest string, bad func(id, v string, err error)) shadow.Stats {
	var sum shadow.Stats
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		v := peers[id]
		var counts map[string]shadowCount
		if err := json.Unmarshal([]byte(v), &counts); err != nil {
			bad(id, v, err)
			continue
		}
		c, ok := counts[module]
		if !ok || c.Digest != digest {
			continue
		}
		st := shadow.Stats{Agreements: c.Agreements, Differences: c.Differences, CandidateErrors: c.CandidateErrors,
			Skipped: c.Skipped, ServedByCandidate: c.ServedByCandidate, ServedByServing: c.ServedByServing}
		if min(st.Agreements, st.Differences, st.CandidateErrors, st.Skipped, st.ServedByCandidate, st.ServedByServing) < 0 {
			bad(id, v, fmt.Errorf("module %s: a negative count: %+v", module, c))
			continue
		}
		sum.AddCounts(st)
	}
	return sum
}

// ReasonRebalanced is the reason of the Event the elected replica records
// on every ReconcileModule when slots move between replicas.
const ReasonRebalanced = "Rebalanced"

// rebalanced, on the elected replica, records a ReasonRebalanced Event on
// every ReconcileModule: the members and how many slots moved, and
// whether a plan moved them for load (the members unchanged).
func (s *shards) rebalanced(a shard.Assignment, moved int, byLoad bool) {
	if !s.leading() || !s.reconcileModules {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var list v1alpha1.ReconcileModuleList
	if err := s.cache.List(ctx, &list); err != nil {
		return // no ReconcileModules served (--reconcile-modules off)
	}
	for i := range list.Items {
		how := "rebalanced"
		if byLoad {
			how = "balanced by load"
		}
		s.recorder.Eventf(&list.Items[i], nil, corev1.EventTypeNormal, ReasonRebalanced, "Shard",
			"shard group %s %s: %d of %d slots moved; %s", s.opts.Group, how, moved, s.space.Slots(), a)
	}
}

// Modes of ShardingOptions.Mode.
const (
	ShardModeAuto       = "auto"
	ShardModeServerSide = "server-side"
	ShardModeClientSide = "client-side"
)

// chooseMode asks the API server whether it filters lists and watches by
// shard (shard.Probe) and picks the mode ShardingOptions.Mode asks for
// (checked by Validate).
func (s *shards) chooseMode(mgr manager.Manager, informers *informer.Informers) error {
	want := s.opts.Mode
	if want == "" {
		want = ShardModeAuto
	}
	var why string // why not server-side
	switch {
	case want == ShardModeClientSide:
		why = "asked for"
	case s.key == shard.ByUID:
		why = "sharding by uid: an object's children and the objects it reads are not placed by its uid, so every replica caches them"
	case informers == nil:
		why = "the cache's informers are not wasmreconcile's (Options.Informers)"
	default:
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReshardTimeout)
		on, err := shard.Probe(ctx, shard.ByNamespace, s.probe)
		cancel()
		switch {
		case err != nil:
			why = "could not tell whether the API server filters by shard: " + err.Error()
		case !on:
			why = "the API server ignores shardSelector (feature gate ShardedListAndWatch off)"
		}
	}
	if why != "" {
		if want == ShardModeServerSide {
			return fmt.Errorf("sharding: mode %s: %s; turn the gate on, or use mode %s or %s", ShardModeServerSide, why, ShardModeAuto, ShardModeClientSide)
		}
		s.mode = ShardModeClientSide + " (" + why + "): every replica caches every object and reconciles those of its slots"
		return nil
	}
	s.serverSide, s.informers = true, informers
	s.mode = ShardModeServerSide + ": each replica lists and watches only its namespaces' objects (shardSelector) and reads others live; cluster-scoped kinds are cached whole and reconciled by the owner of the empty namespace's slot"
	mapper := mgr.GetRESTMapper()
	var decided sync.Map // schema.GroupKind -> bool: a kind's scope does not change
	s.sharded = func(gk schema.GroupKind) (bool, error) {
		if v, ok := decided.Load(gk); ok {
			return v.(bool), nil
		}
		if gk.Group == v1alpha1.GroupVersion.Group {
			return false, nil // the host's own kinds: every replica needs them whole
		}
		mapping, err := mapper.RESTMapping(gk)
		if err != nil {
			return false, err
		}
		sharded := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		decided.Store(gk, sharded)
		return sharded, nil
	}
	informers.SetSharding(informer.Sharding{Sharded: s.sharded})
	return nil
}

// readLive is the reconcilers' ReadLive, server-side: a guest's read of a
// sharded kind in a namespace outside this replica's share (or across
// namespaces) goes to the API server, since the cache holds only the
// share.
func (s *shards) readLive(gvk schema.GroupVersionKind, namespace string) bool {
	if sharded, err := s.sharded(gvk.GroupKind()); err != nil || !sharded {
		return false
	}
	if namespace == "" {
		return true
	}
	slot := s.space.SlotOf(shard.ByNamespace, namespace)
	if s.gate.Active(slot) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.pending[slot]
}

// selectionLocked is the shard selection of the active and pending slots'
// namespaces; s.mu is held.
func (s *shards) selectionLocked() (sel string, nothing bool) {
	names := make([]string, 0, len(s.namespaces))
	for ns := range s.namespaces {
		names = append(names, ns)
	}
	sel, n := s.space.NamespaceSelector(names, func(slot int) bool { return s.pending[slot] || s.gate.Active(slot) })
	switch {
	case n == 0:
		return "", true
	case n > shard.MaxSelectorNamespaces:
		if !s.tooMany {
			s.tooMany = true
			s.log.Info("this replica's share names more namespaces than a shardSelector holds: caching every object until it names fewer", "namespaces", n, "max", shard.MaxSelectorNamespaces)
		}
		return "", false
	}
	s.tooMany = false
	return sel, false
}

// cacheShare, server-side, widens the informers' selection to slots
// before they are admitted, and waits (up to ReshardTimeout) until the
// informers listed with it, so that the first reconciles of the slots'
// objects find them in the cache.
func (s *shards) cacheShare(slots []int) {
	if !s.serverSide {
		return
	}
	s.mu.Lock()
	for _, slot := range slots {
		s.pending[slot] = true
	}
	gen := s.informers.Shard(s.selectionLocked())
	s.mu.Unlock()
	defer s.freeAfter(gen)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReshardTimeout)
	defer cancel()
	start := time.Now()
	if err := s.informers.Resharded(ctx, gen); err != nil {
		s.log.Info("admitting new slots before the cache listed them; their objects are reconciled as they arrive", "error", err.Error())
	} else {
		s.log.Info("cached the share of new slots", "slots", len(slots), "after", time.Since(start).Round(time.Millisecond).String())
	}
	s.mu.Lock()
	for _, slot := range slots {
		delete(s.pending, slot)
	}
	s.mu.Unlock()
}

// reselect, server-side, sets the informers' selection to the active and
// pending slots' namespaces.
func (s *shards) reselect() {
	if !s.serverSide {
		return
	}
	s.mu.Lock()
	gen := s.informers.Shard(s.selectionLocked())
	s.mu.Unlock()
	s.freeAfter(gen)
}

// freeAfter, server-side, returns the memory a reshard's lists left
// behind to the OS (debug.FreeOSMemory) once every informer listed with
// selection gen, or a later one, in the background; calls made while one
// waits coalesce into one more. A reshard decodes the replica's whole
// share, page by page, to find the few objects that joined or changed:
// garbage as large as the share, which Go would otherwise hand back over
// minutes (measured: the two replicas of a plan moving 2 of 256 slots
// were 14 MiB more resident 20 s later).
func (s *shards) freeAfter(gen uint64) {
	s.freeMu.Lock()
	s.freeGen = gen
	if s.freeing {
		s.freeMu.Unlock()
		return
	}
	s.freeing = true
	s.freeMu.Unlock()
	go func() {
		for {
			s.freeMu.Lock()
			g := s.freeGen
			s.freeMu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.ReshardTimeout)
			err := s.informers.Resharded(ctx, g)
			cancel()
			if err == nil {
				debug.FreeOSMemory()
			}
			s.freeMu.Lock()
			if s.freeGen == g {
				s.freeing = false
				s.freeMu.Unlock()
				return
			}
			s.freeMu.Unlock()
		}
	}()
}

// watchNamespaces, server-side, keeps the set of namespaces the selection
// names from: a selector names each namespace, so one created later joins
// the selection (after NamespaceDebounce, which gathers bursts into one
// relist of every sharded kind). It returns once the namespaces are
// listed.
func (s *shards) watchNamespaces(ctx context.Context) error {
	ns := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}
	inf, err := s.cache.GetInformer(ctx, ns)
	if err != nil {
		return fmt.Errorf("sharding: watching namespaces: %w", err)
	}
	set := func(obj any, present bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		o, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		s.mu.Lock()
		_, had := s.namespaces[o.GetName()]
		if present {
			s.namespaces[o.GetName()] = struct{}{}
		} else {
			delete(s.namespaces, o.GetName())
		}
		s.mu.Unlock()
		if had != present {
			select {
			case s.nsChanged <- struct{}{}:
			default:
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, true) },
		DeleteFunc: func(obj any) { set(obj, false) },
	}); err != nil {
		return fmt.Errorf("sharding: watching namespaces: %w", err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("sharding: namespaces not listed: %w", ctx.Err())
	}
	s.reselect()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.nsChanged:
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.opts.NamespaceDebounce):
			}
			s.reselect()
		}
	}()
	return nil
}

// admit is the reconcilers' Shard hook: an object's namespace places it,
// or its uid when sharding by uid. By uid, an object the cache does not
// hold (uid "": deleted) is admitted without a slot: its reconcile only
// forgets what this replica kept of it, and writes nothing.
func (s *shards) admit(key types.NamespacedName, uid types.UID) (func(), bool) {
	if s.key == shard.ByUID && uid == "" {
		return func() {}, true
	}
	slot := s.slotOf(key.Namespace, uid)
	if !s.gate.Enter(slot) {
		if f := s.refused.Load(); f != nil {
			(*f)(key)
		}
		return nil, false
	}
	if f := s.admitted.Load(); f != nil {
		(*f)(key)
	}
	return func() { s.gate.Exit(slot) }, true
}

// admits is the reconcilers' Admits hook: whether this replica runs the
// slot of an object in namespace with uid, placed as admit places it (by
// uid without a read: the event carries the object, or, for a child, its
// owner's uid). The gate's slots turn active before the
// requeue that follows their acquisition lists the cache, so an event it
// refuses just before is covered by that requeue.
func (s *shards) admits(namespace string, uid types.UID) bool {
	return s.gate.Active(s.slotOf(namespace, uid))
}

// slotOf is the slot of an object in namespace with uid, by the key.
func (s *shards) slotOf(namespace string, uid types.UID) int {
	if s.key == shard.ByUID {
		return s.space.SlotOf(s.key, string(uid))
	}
	return s.space.SlotOf(s.key, namespace)
}

// ready is nil once this replica is a member of its group: until then it
// works on no slot.
func (s *shards) ready() error {
	for _, m := range s.coord.Membership().View().Members {
		if m.Self {
			return nil
		}
	}
	return fmt.Errorf("sharding (%s): %s is not yet a member of shard group %s (its Lease is not written yet)", s.mode, s.opts.Identity, s.opts.Group)
}

// report is /readyz/modules' sharding line.
func (s *shards) report() string {
	a := s.coord.Assignment()
	return fmt.Sprintf("sharding %s as %s: %d of %d slots worked on here; %s; %s\n", s.mode, s.opts.Identity, s.gate.ActiveCount(), s.space.Slots(), a, s.planSummary())
}

// Start runs the coordinator in every replica (a manager runnable);
// server-side, it first lists the namespaces the selection names from.
func (s *shards) Start(ctx context.Context) error {
	if s.serverSide {
		if err := s.watchNamespaces(ctx); err != nil {
			return err
		}
	}
	go s.runBalance(ctx)
	if err := s.coord.Run(ctx); err != nil {
		return err // the Lease was lost: the manager stops, the pod restarts
	}
	return nil
}

// NeedLeaderElection is false: every replica takes its share.
func (s *shards) NeedLeaderElection() bool { return false }

// shardAgent names, with sharding, the replica and the generation of its
// claims in the User-Agent of every request the operator makes
// ("… shard=IDENTITY g=GENERATION"), so that the API server's audit log
// says which replica wrote what, under which claims (the chaos test
// audits it; an operator can too).
type shardAgent struct {
	base, identity string
	generation     atomic.Pointer[func() int64] // of the claims
	// last is the User-Agent last made and the generation it names: a
	// request under the same claims reuses it (every status write of a
	// replica makes one).
	last atomic.Pointer[agentString]
}

type agentString struct {
	generation int64
	userAgent  string
}

func newShardAgent(cfg *rest.Config, identity string) *shardAgent {
	base := cfg.UserAgent
	if base == "" {
		base = rest.DefaultKubernetesUserAgent()
	}
	return &shardAgent{base: base, identity: identity}
}

// userAgent is the User-Agent for a request now.
func (a *shardAgent) userAgent() string {
	var gen int64
	if f := a.generation.Load(); f != nil {
		gen = (*f)()
	}
	if last := a.last.Load(); last != nil && last.generation == gen {
		return last.userAgent
	}
	ua := fmt.Sprintf("%s shard=%s g=%d", a.base, a.identity, gen)
	a.last.Store(&agentString{generation: gen, userAgent: ua})
	return ua
}

// wrap is a rest.Config's WrapTransport.
func (a *shardAgent) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		req = req.Clone(req.Context())
		req.Header.Set("User-Agent", a.userAgent())
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// byUID reports whether objects are placed by uid (ShardingOptions.Key).
func (s *shards) byUID() bool { return s.key == shard.ByUID }
