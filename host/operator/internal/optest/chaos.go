package optest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/membership"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// ChaosAuditPolicy is the audit policy a package running Chaos gives its
// control plane (testenv.MainOptions.AuditPolicy): every write of a Lease
// and of a Widget's status, with the object the API server answered.
const ChaosAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    verbs: [create, update, patch]
    resources:
      - group: coordination.k8s.io
        resources: [leases]
      - group: examples.wasmreconcile.io
        resources: [widgets/status]
  - level: None
`

// Chaos timings: the replicas' Leases, short so that the test is quick.
const (
	chaosLease   = 4 * time.Second
	chaosRenew   = 3 * time.Second
	chaosRetry   = 500 * time.Millisecond
	chaosSlots   = 16
	chaosGroup   = "chaos"
	chaosPerNS   = 3
	chaosNSCount = 8
	// chaosBalance is --shard-balance-interval: the elected replica
	// balances by load every 2 s, so that plans move slots between the
	// membership changes too (3 Widgets per namespace hashed into 16
	// slots are rarely within the 10% tolerance).
	chaosBalance = 2 * time.Second
)

// Chaos is issue 27's test of sharding across operator processes, run
// against the package's control plane, whose audit log (auditLog,
// ChaosAuditPolicy) is the record it checks. mode is the operators'
// --shard-mode and by what places a Widget (--shard-key): by
// shard.ByNamespace the Widgets of a namespace move together, by
// shard.ByUID each on its own.
//
// It starts the run build of the operator as processes, each with
// --sharding and its own identity, over Widgets in chaosNSCount
// namespaces; every Widget converges with 1, 2 and 3 replicas (each step
// changes every Widget). The elected replica balances by load every
// chaosBalance, so slots also move between replicas that stay. Then, while a goroutine keeps changing Widgets,
// it kills one replica with SIGKILL, adds one, stops one gracefully, adds
// one and kills one more; after each kill it changes a Widget of each
// namespace (or each Widget, by uid) the killed replica owned and times
// how long until they converge (at most the Lease duration plus 5 s). At
// the end every Widget converges, and the audit log shows, in
// resourceVersion order, that
//
//   - every status write came from a replica (its User-Agent) whose Lease
//     then claimed the slot of the Widget's namespace (or uid);
//   - no replica wrote while another replica's Lease, still live by its
//     renew time, claimed the same slot (no two replicas reconciled an
//     object at overlapping times);
//   - each replica that ran wrote, and every write was accounted for.
func Chaos(t *testing.T, e Env, auditLog, mode string, by shard.Key) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin, err := testshare.GoBinary("operator-run", "./cmd/operator", "", "runonly")
	if err != nil {
		t.Fatal(err)
	}
	module := testwasm.BuildFile(t, "./widget")
	kubeconfig := testenv.Shared(t).Kubeconfig()
	space, err := shard.NewSpace(chaosSlots)
	if err != nil {
		t.Fatal(err)
	}

	// The Widgets.
	var namespaces []string
	type key = types.NamespacedName
	var widgets []key
	uids := map[key]string{}
	for i := range chaosNSCount {
		ns := fmt.Sprintf("%s-c%d", e.NS, i)
		if err := e.C.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.C.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		})
		namespaces = append(namespaces, ns)
		for j := range chaosPerNS {
			w := Widget(ns, fmt.Sprintf("w%d", j), 1)
			if err := e.C.Create(ctx, w); err != nil {
				t.Fatal(err)
			}
			widgets = append(widgets, key{Namespace: ns, Name: w.GetName()})
			uids[widgets[len(widgets)-1]] = string(w.GetUID())
		}
	}
	// placed is what places w among the replicas; Widgets placed alike
	// move together.
	placed := func(w key) string {
		if by == shard.ByUID {
			return uids[w]
		}
		return w.Namespace
	}
	// onePer returns one Widget of each placement value whose owner under
	// a is id.
	onePer := func(a shard.Assignment, id string) []key {
		var ws []key
		for _, w := range widgets {
			if a.OwnerOf(by, placed(w)) == id && !slices.ContainsFunc(ws, func(o key) bool { return placed(o) == placed(w) }) {
				ws = append(ws, w)
			}
		}
		return ws
	}
	var sizeMu sync.Mutex
	size := map[key]int64{} // the size each Widget was last given
	for _, w := range widgets {
		size[w] = 1
	}
	change := func(w key) error {
		sizeMu.Lock()
		defer sizeMu.Unlock()
		n := size[w]%9 + 1
		patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, n)
		if err := e.C.Patch(ctx, Widget(w.Namespace, w.Name, 0), client.RawPatch(types.MergePatchType, patch)); err != nil {
			return err
		}
		size[w] = n
		return nil
	}
	// converged waits until every Widget in ws reports the size it was
	// last given, and returns when the last one did.
	converged := func(what string, ws []key, within time.Duration) time.Time {
		t.Helper()
		var last time.Time
		pending := slices.Clone(ws)
		deadline := time.Now().Add(within)
		for len(pending) > 0 {
			var still []key
			for _, w := range pending {
				sizeMu.Lock()
				want := fmt.Sprintf("%d x grey", size[w])
				sizeMu.Unlock()
				u := Widget(w.Namespace, w.Name, 0)
				if err := e.C.Get(ctx, w, u); err != nil {
					t.Fatal(err)
				}
				s, _, _ := unstructured.NestedString(u.Object, "status", "summary")
				if s != want {
					still = append(still, w)
				} else if now := time.Now(); now.After(last) {
					last = now
				}
			}
			pending = still
			if len(pending) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %d Widgets did not converge within %s, such as %s", what, len(pending), within, pending[0])
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return last
	}
	changeAll := func() {
		t.Helper()
		for _, w := range widgets {
			if err := change(w); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The operators.
	type replica struct {
		id   string
		cmd  *exec.Cmd
		done chan struct{}
		log  string
	}
	replicas := map[string]*replica{}
	var live []string // the identities expected to hold slots
	dir := t.TempDir()
	start := func(id string) {
		t.Helper()
		r := &replica{id: id, done: make(chan struct{}), log: filepath.Join(dir, id+".log")}
		f, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.cmd = exec.Command(bin, "run", "--kubeconfig", kubeconfig, "--module", module,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--max-instances", "2",
			"--compilation-cache-dir", CompilationCache(),
			"--compilation-cache-max-size", "0", // shared by the tests: no one process's bound
			"--leader-elect", "--leader-election-namespace", e.NS,
			"--leader-elect-lease-duration", chaosLease.String(), "--leader-elect-renew-deadline", chaosRenew.String(),
			"--leader-elect-retry-period", chaosRetry.String(),
			"--sharding", "--shard-identity", id, "--shard-slots", strconv.Itoa(chaosSlots), "--shard-group", chaosGroup, "--shard-mode", mode,
			"--shard-key", by.Short(), "--shard-balance-interval", chaosBalance.String())
		r.cmd.Stdout, r.cmd.Stderr = f, f
		r.cmd.Env = testworker.Environ() // the binary compiles in itself
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = r.cmd.Wait()
			f.Close()
			close(r.done)
		}()
		replicas[id] = r
		live = append(live, id)
		t.Cleanup(func() {
			_ = r.cmd.Process.Kill()
			<-r.done
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("the last lines of %s's log:\n%s", id, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		})
	}
	stop := func(id string, sig syscall.Signal) time.Time {
		t.Helper()
		r := replicas[id]
		at := time.Now()
		if err := r.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Fatalf("%s did not exit within a minute of %s", id, sig)
		}
		live = slices.DeleteFunc(live, func(x string) bool { return x == id })
		return at
	}
	// planned is the assignment of the live replicas under the newest
	// balancing plan their Leases publish (balancing by load, every
	// chaosBalance).
	planned := func(leases []coordinationv1.Lease) shard.Assignment {
		var plan shard.Plan
		for _, l := range leases {
			if !slices.Contains(live, strings.TrimPrefix(l.Name, chaosGroup+"-")) {
				continue
			}
			if p, err := shard.ParsePlan(l.Annotations[operator.AnnotationShardPlan], chaosSlots); err == nil && p.Newer(plan) {
				plan = p
			}
		}
		return shard.AssignPlanned(space, live, plan)
	}
	current := func() shard.Assignment {
		t.Helper()
		var leases coordinationv1.LeaseList
		if err := e.C.List(ctx, &leases, client.InNamespace(e.NS), client.MatchingLabels{membership.LabelGroup: chaosGroup}); err != nil {
			t.Fatal(err)
		}
		return planned(leases.Items)
	}
	// settled waits until the live replicas' Leases claim every slot once
	// between them, as the newest plan they publish assigns them, and
	// returns the assignment.
	settled := func(what string) shard.Assignment {
		t.Helper()
		var a shard.Assignment
		testenv.Eventually(t, 2*time.Minute, what, func() error {
			for id, r := range replicas {
				select {
				case <-r.done:
					if slices.Contains(live, id) {
						t.Fatalf("%s: %s exited", what, id)
					}
				default:
				}
			}
			var leases coordinationv1.LeaseList
			if err := e.C.List(ctx, &leases, client.InNamespace(e.NS), client.MatchingLabels{membership.LabelGroup: chaosGroup}); err != nil {
				return err
			}
			a = planned(leases.Items)
			claimed := map[int]string{}
			for _, l := range leases.Items {
				id := strings.TrimPrefix(l.Name, chaosGroup+"-")
				if !slices.Contains(live, id) {
					continue
				}
				c, err := membership.ParseClaims(l.Annotations[membership.AnnotationClaims])
				if err != nil {
					return err
				}
				for _, s := range c.Slots {
					if other, dup := claimed[s]; dup {
						return fmt.Errorf("slot %d claimed by %s and %s", s, other, id)
					}
					if a.Owner(s) != id {
						return fmt.Errorf("%s claims slot %d, which is %s's", id, s, a.Owner(s))
					}
					claimed[s] = id
				}
			}
			if len(claimed) != chaosSlots {
				return fmt.Errorf("%d of %d slots claimed by %v", len(claimed), chaosSlots, live)
			}
			return nil
		})
		return a
	}

	// Every Widget converges with 1, 2 and 3 replicas.
	changes := 0
	mustWrite := map[string]bool{} // replicas the test made write
	for i := range 3 {
		start(fmt.Sprintf("op-%d", i))
		changes++
		a := settled(fmt.Sprintf("%d replicas to split the slots", i+1))
		changeAll()
		converged(fmt.Sprintf("with %d replicas", i+1), widgets, 2*time.Minute)
		for _, w := range widgets {
			mustWrite[a.OwnerOf(by, placed(w))] = true
		}
	}

	// Chaos: Widgets keep changing while replicas die, join and leave.
	changerCtx, stopChanger := context.WithCancel(ctx)
	changerDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-changerCtx.Done():
				changerDone <- nil
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := change(widgets[rng.IntN(len(widgets))]); err != nil && changerCtx.Err() == nil {
				changerDone <- err
				return
			}
		}
	}()
	var takeovers []time.Duration
	// kill kills the live replica that owns the most Widgets.
	kill := func() {
		t.Helper()
		before := current()
		owns := map[string]int{}
		for _, w := range widgets {
			owns[before.OwnerOf(by, placed(w))]++
		}
		id := live[0]
		for _, x := range live {
			if owns[x] > owns[id] {
				id = x
			}
		}
		at := stop(id, syscall.SIGKILL)
		changes++
		// A Widget of each namespace (or uid) the killed replica owned
		// changes now; another replica must take it over once the Lease
		// expires.
		orphaned := onePer(before, id)
		for _, w := range orphaned {
			if err := change(w); err != nil {
				t.Fatal(err)
			}
		}
		if len(orphaned) > 0 {
			last := converged("after "+id+" was killed", orphaned, 2*time.Minute)
			takeovers = append(takeovers, last.Sub(at))
			if took := last.Sub(at); took > chaosLease+5*time.Second {
				t.Errorf("after %s was killed, its %d Widgets converged in %s: more than the Lease duration %s + 5 s", id, len(orphaned), took.Round(time.Millisecond), chaosLease)
			}
		}
		settled("the replicas to settle after " + id + " was killed")
	}
	// join starts a replica and, once the slots are split, changes a Widget
	// in each namespace (or uid) it owns: they converge, so it works (and
	// writes).
	join := func(id string) {
		t.Helper()
		start(id)
		a := settled(id + " to join")
		touched := onePer(a, id)
		for _, w := range touched {
			if err := change(w); err != nil {
				t.Fatal(err)
			}
		}
		converged(id+"'s Widgets after it joined", touched, 2*time.Minute)
		if len(touched) > 0 {
			mustWrite[id] = true
		}
	}
	kill()
	join("op-3")
	changes++
	leaving := live[0]
	stop(leaving, syscall.SIGTERM)
	changes++
	settled("the replicas to settle after " + leaving + " stopped")
	join("op-4")
	changes++
	kill()
	stopChanger()
	if err := <-changerDone; err != nil {
		t.Fatal(err)
	}
	changeAll()
	converged("at the end", widgets, 2*time.Minute)
	if changes < 5+3 {
		t.Fatalf("%d membership changes; the test needs at least 5 after the first three", changes-3)
	}
	t.Logf("%d membership changes; takeovers after a kill: %v (Lease %s)", changes, takeovers, chaosLease)
	var leases coordinationv1.LeaseList
	if err := e.C.List(ctx, &leases, client.InNamespace(e.NS), client.MatchingLabels{membership.LabelGroup: chaosGroup}); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if v, ok := l.Annotations[operator.AnnotationShardPlan]; ok {
			t.Logf("%s follows balancing plan %s", l.Name, v)
		}
	}

	// The audit.
	for _, id := range slices.Clone(live) {
		stop(id, syscall.SIGTERM)
	}
	if len(takeovers) != 2 {
		t.Errorf("%d takeovers timed, want one per kill (2)", len(takeovers))
	}
	writes, err := AuditChaos(auditLog, e.NS, namespaces, space, by, chaosLease)
	if err != nil {
		t.Fatal(err)
	}
	for id := range mustWrite {
		if writes[id] == 0 {
			t.Errorf("the audit log holds no status write by %s, which converged Widgets it owned", id)
		}
	}
	t.Logf("audited status writes by replica: %v", writes)
}

// auditEvent is what AuditChaos reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage          string           `json:"stage"`
	UserAgent      string           `json:"userAgent"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
	ObjectRef      struct {
		Resource, Subresource, Namespace, Name string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	ResponseObject json.RawMessage `json:"responseObject"`
}

// AuditChaos checks the audit log of a Chaos run: Leases of group
// chaosGroup in leaseNS, status writes of Widgets in namespaces. In
// resourceVersion order, every status write must come from a replica
// (shard=ID in its User-Agent) whose Lease then claims the slot of the
// Widget's namespace (by shard.ByNamespace) or uid (shard.ByUID, read
// from the written object), while no other replica's Lease that claims it
// is still live (its renew time plus lease is after the write). It returns
// the status writes per replica, or the first violations.
func AuditChaos(auditLog, leaseNS string, namespaces []string, space shard.Space, by shard.Key, lease time.Duration) (map[string]int, error) {
	f, err := os.Open(auditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type record struct {
		rv    int64
		at    time.Time
		lease *coordinationv1.Lease // a Lease write, or
		ns    string                // a status write in ns
		name  string
		uid   string
		agent string
	}
	var records []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", auditLog, err)
		}
		if ev.Stage != "ResponseComplete" || ev.ResponseStatus.Code >= 300 || len(ev.ResponseObject) == 0 {
			continue
		}
		var meta struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(ev.ResponseObject, &meta); err != nil {
			return nil, err
		}
		rv, err := strconv.ParseInt(meta.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("audit log: resourceVersion %q: %w", meta.Metadata.ResourceVersion, err)
		}
		r := record{rv: rv, at: ev.StageTimestamp.Time}
		switch {
		case ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Namespace == leaseNS && strings.HasPrefix(ev.ObjectRef.Name, chaosGroup+"-"):
			r.lease = &coordinationv1.Lease{}
			if err := json.Unmarshal(ev.ResponseObject, r.lease); err != nil {
				return nil, err
			}
		case ev.ObjectRef.Resource == "widgets" && ev.ObjectRef.Subresource == "status" && slices.Contains(namespaces, ev.ObjectRef.Namespace):
			r.ns, r.name, r.uid, r.agent = ev.ObjectRef.Namespace, ev.ObjectRef.Name, string(meta.Metadata.UID), ev.UserAgent
		default:
			continue
		}
		records = append(records, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(records, func(i, j int) bool { return records[i].rv < records[j].rv })

	// queue holds, per slot, the replicas whose Leases claim it, in the
	// order they claimed it: a replica that claims a slot another live
	// replica claims waits until that one drops it or its Lease expires,
	// so only the first claimant whose Lease is live may work on it.
	queue := map[int][]string{}
	renewed := map[string]time.Time{}
	claims := map[string][]int{}
	writes := map[string]int{}
	var violations []string
	for _, r := range records {
		if r.lease != nil {
			id := strings.TrimPrefix(r.lease.Name, chaosGroup+"-")
			var now []int
			held := r.lease.Spec.HolderIdentity != nil && *r.lease.Spec.HolderIdentity == id
			if v, ok := r.lease.Annotations[membership.AnnotationClaims]; ok && held {
				c, err := membership.ParseClaims(v)
				if err != nil {
					return nil, err
				}
				now = c.Slots
			}
			if r.lease.Spec.RenewTime != nil {
				renewed[id] = r.lease.Spec.RenewTime.Time
			}
			for _, s := range claims[id] {
				if !slices.Contains(now, s) {
					queue[s] = slices.DeleteFunc(queue[s], func(x string) bool { return x == id })
				}
			}
			for _, s := range now {
				if !slices.Contains(claims[id], s) {
					queue[s] = append(queue[s], id)
				}
			}
			claims[id] = now
			continue
		}
		id := agentShard(r.agent)
		if id == "" {
			violations = append(violations, fmt.Sprintf("rv %d: a status write of %s/%s by %q, which names no replica", r.rv, r.ns, r.name, r.agent))
			continue
		}
		writes[id]++
		placed := r.ns
		if by == shard.ByUID {
			if r.uid == "" {
				violations = append(violations, fmt.Sprintf("rv %d: the status write of %s/%s by %s answered no uid", r.rv, r.ns, r.name, id))
				continue
			}
			placed = r.uid
		}
		slot := space.SlotOf(by, placed)
		at := r.at.Format("15:04:05.000")
		i := slices.Index(queue[slot], id)
		if i < 0 {
			violations = append(violations, fmt.Sprintf("rv %d at %s: %s wrote %s/%s (slot %d) while its Lease claimed %v", r.rv, at, id, r.ns, r.name, slot, claims[id]))
			continue
		}
		for _, other := range queue[slot][:i] {
			if renewed[other].Add(lease).After(r.at) {
				violations = append(violations, fmt.Sprintf("rv %d at %s: %s wrote %s/%s (slot %d) while %s, which claimed the slot first and renewed its Lease at %s, was live", r.rv, at, id, r.ns, r.name, slot, other, renewed[other].Format("15:04:05.000")))
			}
		}
	}
	if len(violations) > 0 {
		return writes, fmt.Errorf("%d violations in the audit log %s; the first: %s", len(violations), auditLog, strings.Join(violations[:min(10, len(violations))], "\n"))
	}
	return writes, nil
}

// agentShard is the replica a User-Agent names ("… shard=ID g=GEN").
func agentShard(ua string) string {
	for _, f := range strings.Fields(ua) {
		if id, ok := strings.CutPrefix(f, "shard="); ok {
			return id
		}
	}
	return ""
}
