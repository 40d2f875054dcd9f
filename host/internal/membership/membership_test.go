package membership

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership/membershiptest"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.MainOptions{})) }

func TestClaimsRoundTrip(t *testing.T) {
	for _, c := range []Claims{{}, {Generation: 7, Slots: []int{0}}, {Generation: 1, Slots: []int{0, 1, 2, 5, 7, 8, 4095}}} {
		s := FormatClaims(c)
		got, err := ParseClaims(s)
		if err != nil || got.Generation != c.Generation || !slices.Equal(got.Slots, c.Slots) {
			t.Errorf("%+v -> %q -> %+v, %v", c, s, got, err)
		}
	}
	if got := FormatClaims(Claims{Generation: 3, Slots: []int{0, 1, 2, 5, 7, 8}}); got != "g=3;s=0-2,5,7-8" {
		t.Errorf("FormatClaims = %q", got)
	}
	for _, bad := range []string{"", "g=1", "s=1;g=1", "g=-1;s=", "g=x;s=1", "g=1;s=2-1", "g=1;s=5,3", "g=1;s=1,1", "g=1;s=0-4096", "g=1;s=a", "g=1;s=1-"} {
		if _, err := ParseClaims(bad); err == nil {
			t.Errorf("ParseClaims(%q) succeeded", bad)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	var c coordinationv1client.LeasesGetter = kubernetes.New(nil).CoordinationV1()
	ok := Options{Client: c, Namespace: "ns", Group: "g", Identity: "pod-0"}
	for what, mutate := range map[string]func(*Options){
		"no client":          func(o *Options) { o.Client = nil },
		"no identity":        func(o *Options) { o.Identity = "" },
		"an upper-case name": func(o *Options) { o.Identity = "Pod" },
		"a long group":       func(o *Options) { o.Group = strings.Repeat("g", 64) },
		"a renew deadline over the lease": func(o *Options) {
			o.LeaseDuration, o.RenewDeadline = time.Second, 2*time.Second
		},
	} {
		o := ok
		mutate(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New succeeded", what)
		}
	}
	if _, err := New(ok); err != nil {
		t.Errorf("New: %v", err)
	}
}

// replica is one Membership under test, with what it reported.
type replica struct {
	m      *Membership
	client *membershiptest.Breakable
	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	views  []timedView
	lostAt time.Time
	lost   error
}

type timedView struct {
	at   time.Time
	view View
}

func (r *replica) last() View {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.views) == 0 {
		return View{}
	}
	return r.views[len(r.views)-1].view
}

// goneAt is when r's view first lacked identity after having had it.
func (r *replica) goneAt(identity string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	had := false
	for _, v := range r.views {
		has := slices.Contains(v.view.Identities(), identity)
		if has {
			had = true
		} else if had {
			return v.at, true
		}
	}
	return time.Time{}, false
}

// timing is short, for tests; RenewDeadline + RetryPeriod < LeaseDuration.
var timing = Options{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}

func start(t *testing.T, cs kubernetes.Interface, ns, identity string) *replica {
	t.Helper()
	return startWith(t, cs, ns, identity, nil)
}

// startWith starts a replica whose options set changes (nil: none).
func startWith(t *testing.T, cs kubernetes.Interface, ns, identity string, set func(*Options)) *replica {
	t.Helper()
	r := &replica{client: &membershiptest.Breakable{LeasesGetter: cs.CoordinationV1()}, done: make(chan error, 1)}
	opts := timing
	opts.Client, opts.Namespace, opts.Group, opts.Identity = r.client, ns, "wasmreconcile-operator", identity
	if set != nil {
		set(&opts)
	}
	opts.OnChange = func(v View) {
		r.mu.Lock()
		r.views = append(r.views, timedView{time.Now(), v})
		r.mu.Unlock()
	}
	opts.OnLost = func(err error) {
		r.mu.Lock()
		r.lostAt, r.lost = time.Now(), err
		r.mu.Unlock()
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Errorf("%s: Run did not return", identity)
		}
	})
	return r
}

func clientset(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	cp := testenv.Shared(t)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("membership-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().UnixNano()%1e9)
	if len(ns) > 63 {
		ns = ns[len(ns)-63:]
	}
	ns = strings.Trim(ns, "-")
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cs, ns
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	testenv.Eventually(t, time.Minute, what, cond)
}

func members(r *replica, want ...string) func() error {
	return func() error {
		if got := r.last().Identities(); !slices.Equal(got, want) {
			return fmt.Errorf("members %v, want %v", got, want)
		}
		return nil
	}
}

// TestJoinClaimAndLeave: three replicas see each other; a claim written by
// one is in the others' views once Claim returns and they list again; a
// replica that stops releases its Lease (no holder) and the others drop it.
func TestJoinClaimAndLeave(t *testing.T) {
	t.Parallel()
	cs, ns := clientset(t)
	a, b, c := start(t, cs, ns, "pod-a"), start(t, cs, ns, "pod-b"), start(t, cs, ns, "pod-c")
	for _, r := range []*replica{a, b, c} {
		waitFor(t, "every replica to see all three", members(r, "pod-a", "pod-b", "pod-c"))
	}
	if err := a.m.Claim(context.Background(), Claims{Generation: 4, Slots: []int{2, 0, 1, 1}}); err != nil {
		t.Fatal(err)
	}
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), a.m.LeaseName(), metav1.GetOptions{})
	if err != nil || lease.Annotations[AnnotationClaims] != "g=4;s=0-2" {
		t.Fatalf("after Claim returned, the Lease's claims are %q (%v)", lease.Annotations[AnnotationClaims], err)
	}
	if g, c := a.m.ClaimsGeneration(), a.m.Claims(); g != 4 || c.Generation != 4 {
		t.Errorf("after Claim returned: ClaimsGeneration %d, Claims %+v; want generation 4", g, c)
	}
	waitFor(t, "b to see a's claim", func() error {
		v := b.last()
		if !v.ClaimedByOthers(1) || v.ClaimedByOthers(3) {
			return fmt.Errorf("view %+v", v)
		}
		return nil
	})
	if a.last().ClaimedByOthers(1) {
		t.Error("a counts its own claim as another's")
	}

	c.cancel()
	if err := <-c.done; err != nil {
		t.Fatalf("c's Run: %v", err)
	}
	c.done <- nil // for the cleanup
	lease, err = cs.CoordinationV1().Leases(ns).Get(context.Background(), c.m.LeaseName(), metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity != nil || lease.Annotations[AnnotationClaims] != "" {
		t.Fatalf("c's Lease after it stopped: holder %v, claims %q (%v); want released", ptr.Deref(lease.Spec.HolderIdentity, ""), lease.Annotations[AnnotationClaims], err)
	}
	waitFor(t, "a to drop c", members(a, "pod-a", "pod-b"))
	waitFor(t, "b to drop c", members(b, "pod-a", "pod-b"))
}

// TestKeptAnnotationsOutliveTheirReplica: an annotation a replica
// publishes is among the others' Peers while it lives, and among their
// Kept (for a KeptAnnotations key) after it stopped and released its
// Lease, as long as the Lease exists.
func TestKeptAnnotationsOutliveTheirReplica(t *testing.T) {
	t.Parallel()
	cs, ns := clientset(t)
	const key = "wasmreconcile.io/test-plan"
	set := func(value string) func(*Options) {
		return func(o *Options) {
			if value != "" {
				o.Annotations = func() map[string]string { return map[string]string{key: value} }
			}
			o.PeerAnnotations, o.KeptAnnotations = []string{key}, []string{key}
		}
	}
	a, b := startWith(t, cs, ns, "pod-a", set("v=3")), startWith(t, cs, ns, "pod-b", set(""))
	waitFor(t, "b to see a's annotation", func() error {
		if got := b.m.Peers(key)["pod-a"]; got != "v=3" {
			return fmt.Errorf("peers %v", b.m.Peers(key))
		}
		if got := b.m.Kept(key)[a.m.LeaseName()]; got != "v=3" {
			return fmt.Errorf("kept %v", b.m.Kept(key))
		}
		return nil
	})
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("a's Run: %v", err)
	}
	a.done <- nil // for the cleanup
	waitFor(t, "b to drop a", members(b, "pod-b"))
	if got := b.m.Peers(key); len(got) != 0 {
		t.Errorf("a released its Lease, and b's Peers still hold %v", got)
	}
	if got := b.m.Kept(key)[a.m.LeaseName()]; got != "v=3" {
		t.Errorf("a released its Lease: b's Kept %v, want a's v=3", b.m.Kept(key))
	}
}

// TestCutOffReplicaStopsBeforeOthersTakeOver: a replica that cannot reach
// the API server reports its Lease lost (OnLost) after RenewDeadline; the
// others keep it a member until LeaseDuration after its last renewal, so
// it has stopped before they drop it.
func TestCutOffReplicaStopsBeforeOthersTakeOver(t *testing.T) {
	t.Parallel()
	cs, ns := clientset(t)
	a, b := start(t, cs, ns, "pod-a"), start(t, cs, ns, "pod-b")
	waitFor(t, "a to see both", members(a, "pod-a", "pod-b"))
	waitFor(t, "b to see both", members(b, "pod-a", "pod-b"))
	if err := b.m.Claim(context.Background(), Claims{Generation: 1, Slots: []int{9}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to see b's claim", func() error {
		if !a.last().ClaimedByOthers(9) {
			return errors.New("not yet")
		}
		return nil
	})
	b.client.Broken.Store(true)
	err := <-b.done
	b.done <- err
	if err == nil || !strings.Contains(err.Error(), "lost Lease") || !errors.Is(err, membershiptest.ErrCutOff) {
		t.Fatalf("b's Run after being cut off: %v", err)
	}
	waitFor(t, "a to drop b", members(a, "pod-a"))
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), b.m.LeaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lastRenewal := lease.Spec.RenewTime.Time
	gone, _ := a.goneAt("pod-b")
	b.mu.Lock()
	lostAt := b.lostAt
	b.mu.Unlock()
	if lostAt.IsZero() || !lostAt.Before(gone) {
		t.Errorf("b lost its Lease at %s, a dropped it at %s: a must drop it after", lostAt, gone)
	}
	if gone.Sub(lastRenewal) < timing.LeaseDuration {
		t.Errorf("a dropped b %s after b's last renewal, want at least the lease duration %s", gone.Sub(lastRenewal), timing.LeaseDuration)
	}
	if lostAt.Sub(lastRenewal) < timing.RenewDeadline {
		t.Errorf("b gave up %s after its last renewal, before its renew deadline %s", lostAt.Sub(lastRenewal), timing.RenewDeadline)
	}
	if a.last().ClaimedByOthers(9) {
		t.Error("b's claim outlived it")
	}
}

// TestOneIdentityTwice: two processes with one identity write one Lease;
// a conflict shows a renewal neither wrote, and at least one of them stops
// with an error that names the cause.
func TestOneIdentityTwice(t *testing.T) {
	t.Parallel()
	cs, ns := clientset(t)
	x, y := start(t, cs, ns, "pod-same"), start(t, cs, ns, "pod-same")
	waitFor(t, "one of them to stop", func() error {
		for _, r := range []*replica{x, y} {
			r.mu.Lock()
			err := r.lost
			r.mu.Unlock()
			if err != nil {
				if !strings.Contains(err.Error(), "two replicas have one identity") {
					return fmt.Errorf("stopped with %v", err)
				}
				return nil
			}
		}
		return errors.New("both still run")
	})
}

// TestForeignLeases: a live Lease in the group whose claims cannot be read
// claims every slot; a released one is no member; one that never changes
// drops out after its duration.
func TestForeignLeases(t *testing.T) {
	t.Parallel()
	cs, ns := clientset(t)
	leases := cs.CoordinationV1().Leases(ns)
	now := metav1.NewMicroTime(time.Now())
	mk := func(name, holder, claims string, seconds int32) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGroup: "wasmreconcile-operator"},
			Annotations: map[string]string{AnnotationClaims: claims}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: &now, LeaseDurationSeconds: ptr.To(seconds)}}
		if holder == "" {
			l.Spec.HolderIdentity, l.Spec.RenewTime = nil, nil
		}
		if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("wasmreconcile-operator-garbled", "garbled", "g=1;s=9-3", 600)
	mk("wasmreconcile-operator-released", "", "", 600)
	mk("wasmreconcile-operator-stale", "stale", "g=1;s=7", 2)
	a := start(t, cs, ns, "pod-a")
	waitFor(t, "a to see the garbled and stale Leases", members(a, "garbled", "pod-a", "stale"))
	v := a.last()
	if !v.ClaimedByOthers(1000) || !v.ClaimedByOthers(7) {
		t.Errorf("view %+v: the garbled Lease must claim every slot", v)
	}
	for _, m := range v.Members {
		if m.Identity == "garbled" && (!m.All || !strings.Contains(m.Invalid, "want N or N-M")) {
			t.Errorf("the garbled member: %+v", m)
		}
	}
	waitFor(t, "the stale Lease to expire", members(a, "garbled", "pod-a"))
}
