package sharding

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/membership/membershiptest"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.MainOptions{})) }

// ledger records, across the replicas of one test (one process, one
// clock), when each replica's work on each slot ran, and fails on overlap
// at the moment a slot starts where another replica's work still runs.
type ledger struct {
	t       *testing.T
	mu      sync.Mutex
	running map[int]string // slot -> the replica working on it
	starts  map[string]int // replica -> slots started, in all
	ever    map[string]map[int]bool
	first   map[string]time.Time // replica -> when it first started a slot
	overlap atomic.Int64
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, running: map[int]string{}, starts: map[string]int{}, ever: map[string]map[int]bool{}, first: map[string]time.Time{}}
}

func (l *ledger) acquire(who string, slots []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range slots {
		if other, ok := l.running[s]; ok && other != who {
			l.overlap.Add(1)
			l.t.Errorf("slot %d started on %s while %s works on it", s, who, other)
		}
		l.running[s] = who
		l.starts[who]++
		if l.ever[who] == nil {
			l.ever[who] = map[int]bool{}
			l.first[who] = time.Now()
		}
		l.ever[who][s] = true
	}
}

func (l *ledger) release(who string, slots []int) {
	// Stopping takes a while (calls in flight finish): a window in which
	// another replica starting the slot would show (longer than a
	// membership list period, so that a replica that gives a slot up
	// before it stops would be seen).
	time.Sleep(400 * time.Millisecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range slots {
		if l.running[s] == who {
			delete(l.running, s)
		}
	}
}

// owners is each slot's replica now; every slot must have one for it to
// be complete.
func (l *ledger) owners() map[int]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]string{}
	for s, who := range l.running {
		out[s] = who
	}
	return out
}

type replica struct {
	name   string
	c      *Coordinator
	client *membershiptest.Breakable
	cancel context.CancelFunc
	done   sync.WaitGroup
	moves  atomic.Int64
}

var space = func() shard.Space {
	s, err := shard.NewSpace(32)
	if err != nil {
		panic(err)
	}
	return s
}()

func start(t *testing.T, cs kubernetes.Interface, ns, name string, l *ledger) *replica {
	t.Helper()
	return startSettling(t, cs, ns, name, l, 0)
}

// startSettling starts a replica with Options.Settle settle (0: the
// default).
func startSettling(t *testing.T, cs kubernetes.Interface, ns, name string, l *ledger, settle time.Duration) *replica {
	t.Helper()
	return startPlanned(t, cs, ns, name, l, settle, nil)
}

// startPlanned starts a replica that follows the plan plan returns (nil:
// none).
func startPlanned(t *testing.T, cs kubernetes.Interface, ns, name string, l *ledger, settle time.Duration, plan func() shard.Plan) *replica {
	t.Helper()
	r := &replica{name: name, client: &membershiptest.Breakable{LeasesGetter: cs.CoordinationV1()}}
	mopts := membership.Options{Client: r.client, Namespace: ns, Group: "wasmreconcile-operator", Identity: name,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	c, err := New(mopts, Options{
		Space:        space,
		Acquire:      func(slots []int) { l.acquire(name, slots) },
		Release:      func(_ context.Context, slots []int) { l.release(name, slots) },
		OnAssignment: func(_ shard.Assignment, moved []int) { r.moves.Add(int64(len(moved))) },
		Retry:        200 * time.Millisecond,
		Settle:       settle,
		Plan:         plan,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done.Add(1)
	go func() { defer r.done.Done(); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); r.done.Wait() })
	return r
}

// complete: every slot runs on exactly one replica, each on its owner in
// that replica's assignment, and the replicas' assignments agree on who
// is a member.
func complete(l *ledger, rs ...*replica) func() error {
	return func() error {
		owners := l.owners()
		if len(owners) != space.Slots() {
			return fmt.Errorf("%d of %d slots running: %v", len(owners), space.Slots(), owners)
		}
		var names []string
		for _, r := range rs {
			names = append(names, r.name)
		}
		slices.Sort(names)
		for _, r := range rs {
			a := r.c.Assignment()
			if !slices.Equal(a.Members(), names) {
				return fmt.Errorf("%s's assignment has members %v, want %v", r.name, a.Members(), names)
			}
			for _, s := range r.c.Active() {
				if owners[s] != r.name || a.Owner(s) != r.name {
					return fmt.Errorf("slot %d is active on %s, running on %s, assigned to %s", s, r.name, owners[s], a.Owner(s))
				}
			}
		}
		return nil
	}
}

func namespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns := fmt.Sprintf("sharding-%d", time.Now().UnixNano()%1e9)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// TestHandoverNeverOverlaps: replicas join, one is cut off from the API
// server and one stops; at every step all 32 slots end up running, each on
// one replica, and no slot ever starts on a replica while another still
// works on it.
func TestHandoverNeverOverlaps(t *testing.T) {
	cp := testenv.Shared(t)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cs)
	l := newLedger(t)
	wait := func(what string, cond func() error) { t.Helper(); testenv.Eventually(t, 2*time.Minute, what, cond) }

	a := start(t, cs, ns, "pod-a", l)
	wait("pod-a alone to run every slot", complete(l, a))
	b := start(t, cs, ns, "pod-b", l)
	wait("pod-a and pod-b to split the slots", complete(l, a, b))
	c := start(t, cs, ns, "pod-c", l)
	wait("three replicas to split the slots", complete(l, a, b, c))
	if n := len(c.c.Active()); n < 4 || n > 20 {
		t.Errorf("pod-c, joining two, runs %d of 32 slots; want about a third", n)
	}

	// pod-b is cut off: it stops its slots when its Lease is lost, and the
	// others take them only after its Lease expires.
	bSlots := len(b.c.Active())
	b.client.Broken.Store(true)
	wait("pod-a and pod-c to run every slot", complete(l, a, c))
	if n := len(b.c.Active()); n != 0 {
		t.Errorf("pod-b, cut off, still runs %d slots", n)
	}
	t.Logf("pod-b ran %d slots when cut off", bSlots)

	// pod-a stops gracefully: its slots move to pod-c.
	a.cancel()
	a.done.Wait()
	wait("pod-c to run every slot", complete(l, c))
	if l.overlap.Load() != 0 {
		t.Fatalf("%d overlaps", l.overlap.Load())
	}
	l.mu.Lock()
	t.Logf("slot starts per replica: %v", l.starts)
	l.mu.Unlock()
	if !strings.Contains(fmt.Sprint(c.c.Assignment()), "pod-c=32") {
		t.Errorf("pod-c's assignment: %s", c.c.Assignment())
	}
}

// TestReplicasStartingTogetherSplitAtOnce: replicas that start while no
// member claims a slot wait before claiming; the first whose wait ends
// claims its share of all it sees, and the other then claims its own at
// once: neither ever works on a slot the other owns.
// TestLoneReplicaSettles checks the wait itself.
func TestReplicasStartingTogetherSplitAtOnce(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	l := newLedger(t)
	a := startSettling(t, cs, ns, "pod-a", l, 10*time.Second)
	// pod-a is a member in its own view (its Lease is written) before
	// pod-b starts, so that pod-b's first view holds it, claiming nothing.
	testenv.Eventually(t, time.Minute, "pod-a to see its own Lease", func() error {
		if selfIn(a.c.Membership().View()) == "" {
			return fmt.Errorf("not yet: %+v", a.c.Membership().View().Members)
		}
		return nil
	})
	// pod-b waits too, until pod-a claims (with an hour's Settle, a wait
	// that did not end then would outlast the test).
	b := startSettling(t, cs, ns, "pod-b", l, time.Hour)
	testenv.Eventually(t, 2*time.Minute, "pod-a and pod-b to split the slots", complete(l, a, b))

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range []*replica{a, b} {
		owned := r.c.Assignment().Owned(r.name)
		for s := range l.ever[r.name] {
			if !slices.Contains(owned, s) {
				t.Errorf("%s worked on slot %d, which %s owns: replicas starting together must split the slots at once", r.name, s, r.c.Assignment().Owner(s))
			}
		}
		if len(owned) == 0 {
			t.Errorf("%s owns no slot", r.name)
		}
	}
}

// TestLoneReplicaSettles: a replica alone in its group starts no slot
// before Settle has passed, then runs every slot; one joining it then
// claims its share at once.
func TestLoneReplicaSettles(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	l := newLedger(t)
	const settle = 2 * time.Second
	t0 := time.Now()
	a := startSettling(t, cs, ns, "pod-solo", l, settle)
	testenv.Eventually(t, 2*time.Minute, "pod-solo to run every slot", complete(l, a))
	l.mu.Lock()
	first := l.first["pod-solo"]
	l.mu.Unlock()
	if first.Sub(t0) < settle {
		t.Errorf("pod-solo, alone, started a slot %s after it started; want no sooner than its Settle, %s", first.Sub(t0), settle)
	}
	// A group at work: pod-join must not wait (an hour's Settle would
	// outlast the test).
	b := startSettling(t, cs, ns, "pod-join", l, time.Hour)
	testenv.Eventually(t, 2*time.Minute, "pod-join to take its share", complete(l, a, b))
}

func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(testenv.Shared(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestPlanMovesSlotsWithoutOverlap: a balancing plan moves slots between
// two replicas that stay, within a Retry of each seeing it; while only
// the receiving replica follows it (plans spread through the Leases, so
// replicas see a new one at different times), it waits for the slots
// instead of starting them, and the giving replica keeps them until it
// follows the plan too. No slot ever runs on both.
func TestPlanMovesSlotsWithoutOverlap(t *testing.T) {
	cs := clientset(t)
	ns := namespace(t, cs)
	l := newLedger(t)
	var planA, planB atomic.Pointer[shard.Plan]
	none := shard.Plan{}
	planA.Store(&none)
	planB.Store(&none)
	a := startPlanned(t, cs, ns, "pod-a", l, -1, func() shard.Plan { return *planA.Load() })
	var bSteps atomic.Int64
	b := startPlanned(t, cs, ns, "pod-b", l, -1, func() shard.Plan { bSteps.Add(1); return *planB.Load() })
	testenv.Eventually(t, 2*time.Minute, "pod-a and pod-b to split the slots", complete(l, a, b))

	owned := a.c.Assignment().Owned("pod-a")
	if len(owned) < 4 {
		t.Fatalf("pod-a owns %d slots", len(owned))
	}
	plan := shard.Plan{Version: 1, Moves: map[int]string{}}
	for _, s := range owned[:4] {
		plan.Moves[s] = "pod-b"
	}
	movesB := b.moves.Load()
	planB.Store(&plan) // pod-b first: it may not start what pod-a runs
	testenv.Eventually(t, time.Minute, "pod-b to follow the plan", func() error {
		if b.moves.Load() == movesB {
			return fmt.Errorf("pod-b's assignment did not change")
		}
		return nil
	})
	// pod-b now owns the slots in its assignment while pod-a runs them:
	// were it to start one, the ledger fails the test there (an overlap).
	// Two more steps of pod-b's (each reads the plan once) end the step
	// that followed the plan and run another.
	seen := bSteps.Load()
	testenv.Eventually(t, time.Minute, "pod-b to step twice more with the plan", func() error {
		if n := bSteps.Load(); n < seen+2 {
			return fmt.Errorf("%d steps", n-seen)
		}
		return nil
	})
	owners := l.owners()
	for _, s := range owned[:4] {
		if owners[s] != "pod-a" {
			t.Fatalf("slot %d runs on %q before pod-a follows the plan", s, owners[s])
		}
	}
	planA.Store(&plan)
	testenv.Eventually(t, time.Minute, "the planned slots to move to pod-b", func() error {
		if err := complete(l, a, b)(); err != nil {
			return err
		}
		owners := l.owners()
		for _, s := range owned[:4] {
			if owners[s] != "pod-b" {
				return fmt.Errorf("slot %d runs on %s", s, owners[s])
			}
		}
		return nil
	})
	if n := l.overlap.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
}
