package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The sharding case (issue 27, make bench-shard): one operator without
// sharding against -shard-replicas operators with --sharding, on the same
// objects spread over -shard-namespaces namespaces, each on a fresh control
// plane with the ShardedListAndWatch feature gate on (the server-side mode)
// or off (the client-side mode). Per replica it measures the Widgets its
// informers hold (wasmreconcile_informer_objects), its CPU to converge and
// its RSS 20 s after convergence, as fractions of the single operator's,
// and the guest's work per reconcile (fuel) with the time it took (the
// same instructions cost more when processes share the cores); then it
// waits until the elected replica has balanced the replicas by load (a
// plan usually comes while the Widgets arrive) and, if a plan moved
// slots, reads the Widgets and RSS again, 20 s after; then every operator restarts at
// once (catching up, following the plan they left off with); then a
// replica joins and one leaves, and it counts the slots that moved
// (wasmreconcile_shard_slot_moves_total of a replica that stays).
//
// Each operator identity keeps its compilation cache directory for the
// run, as config/manager's Deployment keeps it in an emptyDir across a
// container's restarts: it compiles the module when it first starts, and
// its restart (catching up) loads the module from its own cache. Nothing
// is shared between identities; a joining replica compiles.

// Goals of issue 27, server-side mode.
const (
	shardGoalCached = 0.40        // of the objects, per replica
	shardGoalCPU    = 0.40        // of the single operator's CPU to converge
	shardGoalRSS    = 0.45        // of the single operator's RSS
	shardGoalJoin   = 0.25 + 0.05 // of the slots, when a 4th replica joins
	shardSlots      = 256         // the operator's default --shard-slots
	// shardBalanceTolerance is the operator's default
	// --shard-balance-tolerance; shardBalanceWait bounds the wait for
	// its plans once the replicas converged (a few 30 s intervals and the
	// handover).
	shardBalanceTolerance = 0.1
	shardBalanceWait      = 3 * time.Minute
	shardWidgetKind       = `kind="Widget.examples.wasmreconcile.io"`
	// widgetsCached is the scrape key of the Widgets an operator's
	// informers hold.
	widgetsCached = "wasmreconcile_informer_objects|" + shardWidgetKind
	widgetEvents  = "wasmreconcile_informer_events_total|" + shardWidgetKind
	// The guest instances closed and made again, by reason.
	recycledIdle   = `wasmreconcile_instances_recycled_total|reason="idle"`
	recycledCalls  = `wasmreconcile_instances_recycled_total|reason="calls"`
	recycledMemory = `wasmreconcile_instances_recycled_total|reason="memory"`
)

// shardRun is what one run of the sharding case measured, per replica.
type shardRun struct {
	replicas int  // 0: the single operator, without --sharding
	alone    bool // one real replica among fake members (-shard-alone)
	// identities are the replicas' --shard-identity, in the order of
	// the figures below.
	identities []string
	// balancedAs (sharded runs, not -shard-alone): once balanced, each
	// replica's identity, the slots it worked on and the plan it
	// followed, the one that held the most Widgets first, for the
	// -shard-alone runs.
	balancedAs []*aloneAs
	converge   time.Duration
	cpu        []time.Duration // over converge
	rss        []int64         // 20 s after convergence
	cached     []float64       // Widgets the informers hold then
	reconciles []float64       // controller_runtime_reconcile_total then
	// fuel and guestSeconds are the sums of wasmreconcile_fuel_used and
	// wasmreconcile_guest_duration_seconds then: the guest's work (one
	// unit per wasm instruction, the same per call in every process) and
	// the wall-clock time it took, whose ratio shows what sharing the
	// cores costs the same instructions.
	fuel, guestSeconds []float64
	// events is wasmreconcile_informer_events_total for the Widget kind
	// then: the watch events the process decoded.
	events []float64
	// recycled is wasmreconcile_instances_recycled_total then, by reason:
	// instances closed and made again (each a guest start).
	recycled []map[string]float64
	// Balancing by load (sharded runs, not -shard-alone): after the RSS
	// above, how long until no replica held more Widgets than the mean by
	// the operator's default tolerance (0: none did), whether that came
	// within shardBalanceWait, the slots the plans moved, and each
	// replica's Widgets and RSS 20 s after.
	balanceWait    time.Duration
	balanced       bool
	balanceMoved   float64
	cachedBalanced []float64
	rssBalanced    []int64
	// idleCPU is each process's CPU over b.idle right after the RSS was
	// read, nothing changing: what it costs per second to be there.
	idleCPU []time.Duration
	// Catching up (not -shard-alone): every operator stopped and started
	// again at once on the Widgets that exist, as after an outage; CPU
	// from each process's start until it has reconciled every Widget it
	// caches and its queue is empty.
	catchUp    time.Duration
	catchUpCPU []time.Duration
	// Membership changes (sharded runs): slots that moved when one more
	// replica joined, and when one left (and how many it had).
	joinMoved, leaveMoved, leaverHad float64
}

// aloneAs is the replica a -shard-alone run starts: its identity, the
// slots it is to work on (0: any) and the balancing plan the fake
// members' Leases carry ("": none).
type aloneAs struct {
	identity string
	slots    float64
	plan     string
}

// shardCase runs the sharding case with the gate on or off, rounds blocks
// of (single, sharded), each sharded run followed with -shard-alone by
// one run per replica, alone among fake members as the sharded run
// balanced them (the one that held the most first), and returns its
// report.
func (b *bench) shardCase(ctx context.Context, gate bool, rounds, objects, replicas int) (string, error) {
	mode := "client-side"
	if gate {
		mode = "server-side"
	}
	title := fmt.Sprintf("sharding by %s, %s mode (ShardedListAndWatch %s): %s Widgets in %d namespaces, %d replicas against one, %d workers each",
		b.shardKey, mode, map[bool]string{true: "on", false: "off"}[gate], thousands(objects), spread, replicas, b.workers)
	if len(b.shardEnv) > 0 {
		title += ", " + strings.Join(b.shardEnv, " ")
	}
	if b.pinCPU >= 0 {
		title += fmt.Sprintf(", every operator on CPU %d and the control plane and driver on the others", b.pinCPU)
	}
	if b.shardAlone {
		title += ", then each replica alone"
	}
	if b.shardExisting {
		title += ", the Widgets created before the operators start"
	}
	if b.shardWork > 0 {
		title += fmt.Sprintf(", the widget working %s rounds per reconcile", thousands(b.shardWork))
	}
	var runs []shardRun
	perRound := 2
	if b.shardAlone {
		perRound += replicas
	}
	n := 0
	once := func(what string, replicas int, alone *aloneAs) (shardRun, error) {
		n++
		label := fmt.Sprintf("%s: run %d of %d (%s)", title, n, perRound*rounds, what)
		run, err := b.shardRunOnce(ctx, label, gate, mode, objects, replicas, alone)
		if err != nil {
			return run, fmt.Errorf("%s: %w", label, err)
		}
		runs = append(runs, run)
		return run, nil
	}
	for range rounds {
		if _, err := once("single", 0, nil); err != nil {
			return "", err
		}
		sharded, err := once(fmt.Sprintf("%d replicas", replicas), replicas, nil)
		if err != nil {
			return "", err
		}
		if !b.shardAlone {
			continue
		}
		for _, alone := range sharded.balancedAs {
			if _, err := once(fmt.Sprintf("%s alone among %d fake members, as balanced", alone.identity, replicas-1), replicas, alone); err != nil {
				return "", err
			}
		}
	}
	return b.reportShard(title, mode, objects, runs), nil
}

// shardRunOnce runs one operator without sharding (replicas 0) or
// replicas operators with it, on a fresh control plane; with alone, one
// of them, the others fake members.
func (b *bench) shardRunOnce(ctx context.Context, label string, gate bool, mode string, objects, replicas int, alone *aloneAs) (res shardRun, err error) {
	res.replicas, res.alone = replicas, alone != nil
	b.say("%s: starting a control plane (load average %s)", label, loadavg())
	crds, err := crdsFor(b.crdFile, []kind{exampleWidget})
	if err != nil {
		return res, err
	}
	var gates []string
	if gate {
		gates = []string{"ShardedListAndWatch=true"}
	}
	cp, err := startControlPlane(b.assets, crds, gates...)
	if err != nil {
		return res, err
	}
	defer cp.stop()
	b.say("%s: creating %d namespaces", label, spread+1)
	if err := createNamespace(ctx, cp.config); err != nil {
		return res, err
	}
	runDir, err := os.MkdirTemp(b.work, "run-shard-")
	if err != nil {
		return res, err
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	pprofAddrs := map[*proc]string{} // with -cpu-profile or -heap-profiles
	start := func(i int, logSuffix string) (*proc, error) {
		id := fmt.Sprintf("op-%d", i)
		if alone != nil {
			id = alone.identity
		}
		var pprofAddr string
		if b.cpuProfile > 0 || b.heapProfiles {
			var err error
			if pprofAddr, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		bin, pin := pinned(b.pinCPU, b.operatorBin)
		p, err := startProc(id, bin, func(metrics, probe string) []string {
			args := []string{"run", "--kubeconfig", cp.Kubeconfig(), "--max-instances", strconv.Itoa(b.workers),
				"--metrics-bind-address", metrics, "--health-probe-bind-address", probe, "--module", b.shardWasm,
				"--compilation-cache-dir", filepath.Join(runDir, id+"-cache")}
			if pprofAddr != "" {
				args = append(args, "--pprof-bind-address", pprofAddr)
			}
			if replicas > 0 {
				args = append(args, "--leader-elect", "--leader-election-namespace", namespace,
					"--sharding", "--shard-mode", mode, "--shard-identity", id, "--shard-key", b.shardKey)
			}
			return append(pin, args...)
		}, filepath.Join(runDir, id+logSuffix+".log"), b.shardEnv...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if pprofAddr != "" {
			pprofAddrs[p] = pprofAddr
		}
		return p, nil
	}
	n := max(replicas, 1)
	if alone != nil {
		// One real replica; the others are Leases the driver renews,
		// carrying the plan the real replicas made, so that the replica
		// works on the share it held balanced with no other operator
		// process beside it (the other shares are reconciled by no one).
		n = 1
		var fakes []string
		for i := range replicas {
			if id := fmt.Sprintf("op-%d", i); id != alone.identity {
				fakes = append(fakes, id)
			}
		}
		stopFakes, err := fakeMembers(ctx, cp, fakes, alone.plan)
		if err != nil {
			return res, err
		}
		defer stopFakes()
	}
	for i := range n {
		if _, err := start(i, ""); err != nil {
			return res, err
		}
	}
	b.say("%s: waiting for %d operator(s) to be ready", label, n)
	for _, p := range procs {
		if err := p.waitReady(ctx, 5*time.Minute); err != nil {
			return res, err
		}
	}
	if replicas > 0 {
		if err := b.waitMembers(ctx, procs, replicas); err != nil {
			return res, err
		}
	}
	if alone != nil && alone.slots > 0 {
		if err := waitSlots(ctx, procs[0], alone.slots); err != nil {
			return res, err
		}
	}
	for _, p := range procs {
		res.identities = append(res.identities, p.name)
	}
	if err := sleep(ctx, 2*time.Second); err != nil { // let start-up work settle
		return res, err
	}
	dyn, err := dynamic.NewForConfig(cp.config)
	if err != nil {
		return res, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ready := newReadiness()
	if err := watchReadiness(watchCtx, dyn, exampleWidget, ready); err != nil {
		return res, err
	}
	cpu0 := make([]time.Duration, n)
	for i, p := range procs {
		if cpu0[i], err = cpuTime(p.pid()); err != nil {
			return res, err
		}
	}
	var t0 time.Time
	created := make(chan error, 1)
	if b.shardExisting {
		// The operators ran once, so each one's compilation cache holds
		// the module; stopped, they see the Widgets created, and started
		// again at once they converge on them: CPU from each one's start.
		for _, p := range procs {
			p.stop()
		}
		procs = nil
		b.say("%s: creating %s Widgets, no operator running", label, thousands(objects))
		tc := time.Now()
		if err := createWidgets(ctx, dyn, []kind{exampleWidget}, objects, b.creators); err != nil {
			return res, err
		}
		b.say("%s: created %s Widgets in %s; starting the operator(s) at once", label, thousands(objects), time.Since(tc).Round(time.Millisecond))
		created = nil // waitConverged reports no creates
		t0 = time.Now()
		for i := range n {
			if _, err := start(i, "-existing"); err != nil {
				return res, err
			}
			cpu0[i] = 0
		}
		for _, p := range procs { // serving its metrics, which the waits below read
			if err := p.waitReady(ctx, 5*time.Minute); err != nil {
				return res, err
			}
		}
	} else {
		b.say("%s: creating %s Widgets", label, thousands(objects))
		t0 = time.Now()
		go func() { created <- createWidgets(ctx, dyn, []kind{exampleWidget}, objects, b.creators) }()
	}
	var profiled []chan error
	if b.cpuProfile > 0 {
		// Every operator profiled over the same window, from the first
		// create: the single one's profile compares with each replica's.
		for _, p := range procs {
			path := filepath.Join(runDir, p.name+"-cpu.pprof")
			done := make(chan error, 1)
			profiled = append(profiled, done)
			go func() { done <- saveCPUProfile(pprofAddrs[p], b.cpuProfile, path) }()
		}
	}
	if alone != nil {
		// Converged: every Widget of the replica's share Ready, once all
		// are created (its informers hold exactly its share).
		if created != nil { // nil: created before the start (-shard-existing)
			if err := <-created; err != nil {
				return res, err
			}
			created = nil
		}
		// The replica's share is read from its metrics to learn it (at
		// most once a second), to confirm it once that many Widgets are
		// Ready, and every 5 s in case it shrank: a scrape costs the
		// replica ~4.5 ms of CPU, which is what is measured, and the
		// single operator's wait scrapes nothing. (Until 2026-12-06 this
		// loop scraped every 50 ms, ~0.09 s of CPU a second added to each
		// replica alone after the creates ended.)
		var share float64
		var scraped time.Time
		for {
			readyNow := float64(ready.count.Load())
			since := time.Since(scraped)
			if (share == 0 && since >= time.Second) || (share > 0 && readyNow >= share) || since >= 5*time.Second {
				s, err := procs[0].scrapeSeries("wasmreconcile_informer_objects", shardWidgetKind)
				if err != nil {
					return res, err
				}
				scraped = time.Now()
				if s > 0 && readyNow >= s {
					break
				}
				share = s
			}
			if time.Since(t0) > b.timeout {
				return res, fmt.Errorf("%d of its %v Widgets Ready after %s", ready.count.Load(), share, b.timeout)
			}
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return res, err
			}
		}
	} else if created, err = b.waitConverged(ctx, label, ready, int64(objects), t0, created, procs); err != nil {
		return res, err
	}
	res.converge = time.Since(t0)
	tConv := time.Now()
	for i, p := range procs {
		c, err := cpuTime(p.pid())
		if err != nil {
			return res, err
		}
		res.cpu = append(res.cpu, c-cpu0[i])
	}
	if created != nil {
		if err := <-created; err != nil {
			return res, err
		}
	}
	b.say("%s: all %s Ready after %s (CPU %s); RSS in %s", label, thousands(objects), res.converge.Round(time.Millisecond),
		fmtDurations(res.cpu), time.Until(tConv.Add(rssAfter)).Round(time.Second))
	if err := sleep(ctx, time.Until(tConv.Add(rssAfter))); err != nil {
		return res, err
	}
	for _, p := range procs {
		rss, _, err := memory(p.pid())
		if err != nil {
			return res, err
		}
		cached, err := p.scrapeSeries("wasmreconcile_informer_objects", shardWidgetKind)
		if err != nil {
			return res, err
		}
		m, err := p.scrape("controller_runtime_reconcile_total", "wasmreconcile_fuel_used_sum", "wasmreconcile_guest_duration_seconds_sum",
			recycledIdle, recycledCalls, recycledMemory, widgetEvents)
		if err != nil {
			return res, err
		}
		res.rss = append(res.rss, rss)
		res.cached = append(res.cached, cached)
		res.reconciles = append(res.reconciles, m["controller_runtime_reconcile_total"])
		res.fuel = append(res.fuel, m["wasmreconcile_fuel_used_sum"])
		res.events = append(res.events, m[widgetEvents])
		res.guestSeconds = append(res.guestSeconds, m["wasmreconcile_guest_duration_seconds_sum"])
		res.recycled = append(res.recycled, map[string]float64{"idle": m[recycledIdle], "calls": m[recycledCalls], "memory": m[recycledMemory]})
	}
	b.say("%s: RSS %s; Widgets cached %v; reconciles %v", label, fmtMiBs(res.rss), res.cached, res.reconciles)
	if replicas > 0 && alone == nil {
		if err := b.waitBalanced(ctx, label, procs, replicas, objects, &res); err != nil {
			return res, err
		}
		if res.balancedAs, err = balancedAs(ctx, cp, procs, res.cachedBalanced); err != nil {
			return res, err
		}
	}
	b.say("%s: measuring idle CPU for %s", label, b.idle)
	idle0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		if idle0[i], err = cpuTime(p.pid()); err != nil {
			return res, err
		}
	}
	if err := sleep(ctx, b.idle); err != nil {
		return res, err
	}
	for i, p := range procs {
		c, err := cpuTime(p.pid())
		if err != nil {
			return res, err
		}
		res.idleCPU = append(res.idleCPU, c-idle0[i])
	}
	for _, done := range profiled {
		if err := <-done; err != nil {
			return res, err
		}
	}
	if len(profiled) > 0 {
		b.say("%s: CPU profiles of the first %s in %s", label, b.cpuProfile, runDir)
	}
	if b.heapProfiles {
		for _, p := range procs {
			path := filepath.Join(runDir, p.name+"-heap.pprof")
			if err := saveHeapProfile(pprofAddrs[p], path); err != nil {
				return res, err
			}
		}
		b.say("%s: heap profiles in %s", label, runDir)
	}
	if alone != nil {
		return res, nil
	}

	// Catching up: stop every operator, then start them again at once.
	b.say("%s: restarting every operator at once on the %s Widgets", label, thousands(objects))
	for _, p := range procs {
		p.stop()
	}
	procs = nil
	t1 := time.Now()
	for i := range n {
		if _, err := start(i, "-restart"); err != nil {
			return res, err
		}
	}
	// Client-side, every replica caches every object.
	holders := 1
	if replicas > 0 && !gate {
		holders = replicas
	}
	if err := b.waitCaughtUp(ctx, procs, replicas, objects, holders); err != nil {
		return res, err
	}
	res.catchUp = time.Since(t1)
	for _, p := range procs {
		c, err := cpuTime(p.pid())
		if err != nil {
			return res, err
		}
		res.catchUpCPU = append(res.catchUpCPU, c)
	}
	b.say("%s: caught up after %s (CPU since start %s)", label, res.catchUp.Round(time.Millisecond), fmtDurations(res.catchUpCPU))
	if replicas == 0 {
		return res, nil
	}

	// One more replica joins; then the second leaves, gracefully. The
	// first stays and counts the slots that move.
	moves := func() (float64, error) {
		m, err := procs[0].scrape("wasmreconcile_shard_slot_moves_total")
		return m["wasmreconcile_shard_slot_moves_total"], err
	}
	before, err := moves()
	if err != nil {
		return res, err
	}
	b.say("%s: a replica joins", label)
	joiner, err := start(replicas, "")
	if err != nil {
		return res, err
	}
	if err := joiner.waitReady(ctx, 5*time.Minute); err != nil {
		return res, err
	}
	if err := b.waitMembers(ctx, procs, len(procs)); err != nil {
		return res, err
	}
	after, err := moves()
	if err != nil {
		return res, err
	}
	res.joinMoved = after - before
	leaver := procs[1]
	m, err := leaver.scrape("wasmreconcile_shard_slots")
	if err != nil {
		return res, err
	}
	res.leaverHad = m["wasmreconcile_shard_slots"]
	b.say("%s: %v slots moved to the new replica; %s leaves with %v", label, res.joinMoved, leaver.name, res.leaverHad)
	leaver.stop()
	procs = append(procs[:1], procs[2:]...)
	defer leaver.stop()
	if err := b.waitMembers(ctx, procs, len(procs)); err != nil {
		return res, err
	}
	final, err := moves()
	if err != nil {
		return res, err
	}
	res.leaveMoved = final - after
	b.say("%s: %v slots moved when it left", label, res.leaveMoved)
	return res, nil
}

// waitCaughtUp waits until the restarted operators' informers hold the
// objects holders times between them (each replica some, on all the
// slots), with nothing queued, and each has reconciled at least what it
// holds; client-side (holders > 1), where each replica holds every object
// and queues only its own, until they reconciled the objects between
// them.
func (b *bench) waitCaughtUp(ctx context.Context, procs []*proc, replicas, objects, holders int) error {
	deadline := time.Now().Add(b.timeout)
	held := objects * holders
	for {
		var cached, slots, reconciled float64
		done := true
		for _, p := range procs {
			if err := p.exited(); err != nil {
				if p.restartIfPortTaken() {
					done = false
					continue
				}
				return err
			}
			// One scrape per poll: each costs the operator CPU, which is
			// what is measured.
			m, err := p.scrape(widgetsCached, "controller_runtime_reconcile_total", "workqueue_depth", "wasmreconcile_shard_members", "wasmreconcile_shard_slots")
			if err != nil {
				done = false
				continue
			}
			mine := m[widgetsCached]
			cached += mine
			slots += m["wasmreconcile_shard_slots"]
			reconciled += m["controller_runtime_reconcile_total"]
			if mine == 0 || (holders == 1 && m["controller_runtime_reconcile_total"] < mine) || m["workqueue_depth"] > 0 ||
				(replicas > 0 && int(m["wasmreconcile_shard_members"]) != replicas) {
				done = false
			}
		}
		if done && int(cached) == held && int(reconciled) >= objects && (replicas == 0 || slots == shardSlots) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("restarted operators did not catch up in %s (%v of %d Widgets cached)", b.timeout, cached, held)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitBalanced waits until no replica of procs holds more Widgets than
// the mean by shardBalanceTolerance, every slot worked on and every
// replica seeing the others (up to shardBalanceWait), then 20 s more,
// and reads each replica's Widgets and RSS again into res.
func (b *bench) waitBalanced(ctx context.Context, label string, procs []*proc, replicas, objects int, res *shardRun) error {
	t0 := time.Now()
	mean := float64(objects) / float64(replicas)
	for {
		var slots, moved, most, total float64
		agree := true
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
			m, err := p.scrape(widgetsCached, "wasmreconcile_shard_slots", "wasmreconcile_shard_members", "wasmreconcile_shard_balance_moves_total")
			if err != nil {
				agree = false
				continue
			}
			slots += m["wasmreconcile_shard_slots"]
			moved += m["wasmreconcile_shard_balance_moves_total"]
			most = max(most, m[widgetsCached])
			total += m[widgetsCached]
			if int(m["wasmreconcile_shard_members"]) != replicas {
				agree = false
			}
		}
		res.balanceMoved = moved
		if agree && slots == shardSlots && int(total) == objects && most <= mean*(1+shardBalanceTolerance) {
			res.balanced = true
			break
		}
		if time.Since(t0) > shardBalanceWait {
			b.say("%s: not balanced by load within %s (largest share %.0f of a mean %.0f)", label, shardBalanceWait, most, mean)
			break
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	res.balanceWait = time.Since(t0)
	if res.balanceMoved == 0 {
		res.cachedBalanced, res.rssBalanced = res.cached, res.rss
		return nil
	}
	b.say("%s: balanced by load after %s (%.0f slots moved); RSS in %s", label, res.balanceWait.Round(time.Second), res.balanceMoved, rssAfter)
	if err := sleep(ctx, rssAfter); err != nil {
		return err
	}
	for _, p := range procs {
		rss, _, err := memory(p.pid())
		if err != nil {
			return err
		}
		cached, err := p.scrapeSeries("wasmreconcile_informer_objects", shardWidgetKind)
		if err != nil {
			return err
		}
		res.rssBalanced = append(res.rssBalanced, rss)
		res.cachedBalanced = append(res.cachedBalanced, cached)
	}
	b.say("%s: after balancing: RSS %s; Widgets cached %v", label, fmtMiBs(res.rssBalanced), res.cachedBalanced)
	return nil
}

// waitMembers waits until every process of procs sees members members
// and their slots add up to every slot, each worked on by one (with fake
// members, -shard-alone, to the real replicas' share).
func (b *bench) waitMembers(ctx context.Context, procs []*proc, members int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var slots float64
		agree := true
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
			m, err := p.scrape("wasmreconcile_shard_members", "wasmreconcile_shard_slots")
			if err != nil {
				agree = false
				continue
			}
			if int(m["wasmreconcile_shard_members"]) != members {
				agree = false
			}
			slots += m["wasmreconcile_shard_slots"]
		}
		if agree && (slots == shardSlots || (members > len(procs) && slots > 0)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d replicas did not settle on %d members working on %d slots in 2 min (%v slots worked on)", len(procs), members, shardSlots, slots)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// reportShard prints each run's figures and the sharded replicas' largest
// fractions of the single operator's, against issue 27's goals.
func (b *bench) reportShard(title, mode string, objects int, runs []shardRun) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n== %s\n", title)
	var single *shardRun
	// The largest figures over the alone runs that follow a sharded run.
	var aloneCached, aloneCPU, aloneRSS float64
	alones := 0
	for i := range runs {
		r := &runs[i]
		if r.replicas == 0 {
			single = r
			fmt.Fprintf(&sb, "single operator: converged in %s, CPU %.2fs (%.0f µs per reconcile), RSS %.1f MiB, Widgets cached %.0f, %.0f reconciles (%.0f a second), %.0f watch events\n",
				r.converge.Round(time.Millisecond), r.cpu[0].Seconds(), 1e6*ratio(r.cpu[0].Seconds(), r.reconciles[0]), mib(r.rss[0]), r.cached[0], r.reconciles[0],
				ratio(r.reconciles[0], r.converge.Seconds()), r.events[0])
			if len(r.catchUpCPU) > 0 {
				fmt.Fprintf(&sb, "  restarted: caught up in %s, CPU %.2fs\n", r.catchUp.Round(time.Millisecond), r.catchUpCPU[0].Seconds())
			}
			if len(r.idleCPU) > 0 {
				fmt.Fprintf(&sb, "  idle after converging: %.1f ms of CPU per second over %s\n", perSecond(r.idleCPU[0], b.idle), b.idle)
			}
			fmt.Fprintf(&sb, "  guest: %s fuel per reconcile, %.0f ms in the guest per 10⁹ fuel; instances recycled %s\n",
				thousands(int(ratio(r.fuel[0], r.reconciles[0]))), 1000*ratio(r.guestSeconds[0], r.fuel[0]/1e9), fmtRecycled(r.recycled[0]))
			continue
		}
		if single == nil {
			continue
		}
		who := fmt.Sprintf("%d replicas", r.replicas)
		if r.alone {
			who = fmt.Sprintf("%s alone among %d fake members", r.identities[0], r.replicas-1)
		}
		fmt.Fprintf(&sb, "%s: converged in %s (%.2f× the single operator's time)\n", who, r.converge.Round(time.Millisecond), ratio(r.converge.Seconds(), single.converge.Seconds()))
		var maxCached, maxCPU, maxRSS float64
		for i := range r.cpu {
			cached := r.cached[i] / float64(objects)
			cpu := ratio(r.cpu[i].Seconds(), single.cpu[0].Seconds())
			rss := ratio(float64(r.rss[i]), float64(single.rss[0]))
			maxCached, maxCPU, maxRSS = max(maxCached, cached), max(maxCPU, cpu), max(maxRSS, rss)
			fmt.Fprintf(&sb, "  %s: Widgets cached %.0f (%.1f%%), CPU %.2fs (%.1f%%; %.0f µs per reconcile), RSS %.1f MiB (%.1f%%), %.0f reconciles (%.0f a second), %.0f watch events\n",
				r.identities[i], r.cached[i], 100*cached, r.cpu[i].Seconds(), 100*cpu, 1e6*ratio(r.cpu[i].Seconds(), r.reconciles[i]), mib(r.rss[i]), 100*rss,
				r.reconciles[i], ratio(r.reconciles[i], r.converge.Seconds()), r.events[i])
		}
		var guest []string
		perFuel := ratio(single.guestSeconds[0], single.fuel[0])
		for i := range r.fuel {
			guest = append(guest, fmt.Sprintf("%s fuel per reconcile, %.0f ms per 10⁹ fuel (%.2f×), recycled %s", thousands(int(ratio(r.fuel[i], r.reconciles[i]))),
				1000*ratio(r.guestSeconds[i], r.fuel[i]/1e9), ratio(ratio(r.guestSeconds[i], r.fuel[i]), perFuel), fmtRecycled(r.recycled[i])))
		}
		fmt.Fprintf(&sb, "  guest: %s (of the single operator's time per fuel: the same instructions on shared cores)\n", strings.Join(guest, "; "))
		if len(r.idleCPU) > 0 {
			var per []string
			for _, c := range r.idleCPU {
				per = append(per, fmt.Sprintf("%.1f", perSecond(c, b.idle)))
			}
			fmt.Fprintf(&sb, "  idle after converging: %s ms of CPU per second over %s (the single operator: %.1f)\n",
				strings.Join(per, ", "), b.idle, perSecond(single.idleCPU[0], b.idle))
		}
		goal := func(v, g float64) string {
			if mode != "server-side" {
				return "(no goal for this mode)"
			}
			if v <= g {
				return fmt.Sprintf("≤ %.0f%%: met", 100*g)
			}
			return fmt.Sprintf("≤ %.0f%%: missed", 100*g)
		}
		fmt.Fprintf(&sb, "  largest share: cached %.1f%% %s; CPU %.1f%% %s; RSS %.1f%% %s\n",
			100*maxCached, goal(maxCached, shardGoalCached), 100*maxCPU, goal(maxCPU, shardGoalCPU), 100*maxRSS, goal(maxRSS, shardGoalRSS))
		if len(r.cachedBalanced) > 0 {
			var maxCached, maxRSS float64
			var per []string
			for i := range r.cachedBalanced {
				cached := r.cachedBalanced[i] / float64(objects)
				rss := ratio(float64(r.rssBalanced[i]), float64(single.rss[0]))
				maxCached, maxRSS = max(maxCached, cached), max(maxRSS, rss)
				per = append(per, fmt.Sprintf("op-%d %.0f (%.1f%%), %.1f MiB (%.1f%%)", i, r.cachedBalanced[i], 100*cached, mib(r.rssBalanced[i]), 100*rss))
			}
			how := fmt.Sprintf("after %s, %.0f slots moved", r.balanceWait.Round(time.Second), r.balanceMoved)
			switch {
			case !r.balanced:
				how = fmt.Sprintf("not within %s (%.0f slots moved)", shardBalanceWait, r.balanceMoved)
			case r.balanceMoved == 0:
				how = "within the tolerance already"
			}
			fmt.Fprintf(&sb, "  balanced by load (%s): Widgets cached and RSS 20 s later: %s\n", how, strings.Join(per, "; "))
			fmt.Fprintf(&sb, "  largest share after balancing: cached %.1f%% %s; RSS %.1f%% %s\n",
				100*maxCached, goal(maxCached, shardGoalCached), 100*maxRSS, goal(maxRSS, shardGoalRSS))
		}
		if len(r.catchUpCPU) > 0 && len(single.catchUpCPU) > 0 {
			var maxCatchUp float64
			for i, c := range r.catchUpCPU {
				f := ratio(c.Seconds(), single.catchUpCPU[0].Seconds())
				maxCatchUp = max(maxCatchUp, f)
				fmt.Fprintf(&sb, "  restarted op-%d: CPU since start %.2fs (%.1f%%)\n", i, c.Seconds(), 100*f)
			}
			fmt.Fprintf(&sb, "  restarted, catching up on the existing Widgets: in %s (%.2f× the single operator's %s); largest CPU share %.1f%% %s\n",
				r.catchUp.Round(time.Millisecond), ratio(r.catchUp.Seconds(), single.catchUp.Seconds()), single.catchUp.Round(time.Millisecond),
				100*maxCatchUp, goal(maxCatchUp, shardGoalCPU))
		}
		if r.alone {
			fmt.Fprintf(&sb, "  (one real replica, %s, the other %d members fake, their Leases carrying the plan the replicas made: no joins or leaves measured)\n", r.identities[0], r.replicas-1)
			aloneCached, aloneCPU, aloneRSS = max(aloneCached, maxCached), max(aloneCPU, maxCPU), max(aloneRSS, maxRSS)
			alones++
			if i+1 == len(runs) || !runs[i+1].alone {
				fmt.Fprintf(&sb, "each of %d replicas alone, as balanced: largest cached %.1f%% %s; CPU %.1f%% %s; RSS %.1f%% %s\n", alones,
					100*aloneCached, goal(aloneCached, shardGoalCached), 100*aloneCPU, goal(aloneCPU, shardGoalCPU), 100*aloneRSS, goal(aloneRSS, shardGoalRSS))
				aloneCached, aloneCPU, aloneRSS, alones = 0, 0, 0, 0
			}
			continue
		}
		join := r.joinMoved / shardSlots
		verdict := "met"
		if join > shardGoalJoin {
			verdict = "missed"
		}
		fmt.Fprintf(&sb, "  a replica joined: %.0f of %d slots moved (%.1f%%; ≤ %.0f%%: %s)\n", r.joinMoved, shardSlots, 100*join, 100*shardGoalJoin, verdict)
		verdict = "met"
		if r.leaveMoved != r.leaverHad {
			verdict = "missed"
		}
		fmt.Fprintf(&sb, "  a replica left: %.0f slots moved, it had %.0f (only its own: %s)\n", r.leaveMoved, r.leaverHad, verdict)
	}
	return sb.String()
}

func fmtDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2fs", d.Seconds())
	}
	return strings.Join(parts, " ")
}

func fmtMiBs(bs []int64) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%.1f MiB", mib(b))
	}
	return strings.Join(parts, " ")
}

// fakeMembers writes a Lease of the operator's shard group for each of
// ids, claiming no slot and carrying plan as the balancing plan they
// follow ("": none), and renews them every 2 s until stop: members that
// take their share of the slots and do no work (-shard-alone).
func fakeMembers(ctx context.Context, cp *controlPlane, ids []string, plan string) (stop func(), err error) {
	cs, err := kubernetes.NewForConfig(cp.config)
	if err != nil {
		return nil, err
	}
	leases := cs.CoordinationV1().Leases(namespace)
	write := func(id string) error {
		name := "wasmreconcile-operator-" + id
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		} else if err != nil {
			return err
		}
		l.Labels = map[string]string{"wasmreconcile.io/shard-group": "wasmreconcile-operator"}
		l.Annotations = map[string]string{"wasmreconcile.io/shard-claims": "g=1;s="}
		if plan != "" {
			l.Annotations[annotationShardPlan] = plan
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &id, ptr.To(int32(15))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		if l.ResourceVersion == "" {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		return err
	}
	for _, id := range ids {
		if err := write(id); err != nil {
			return nil, fmt.Errorf("writing a fake member's Lease: %w", err)
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Second):
			}
			for _, id := range ids {
				_ = write(id)
			}
		}
	}()
	return func() { close(done) }, nil
}

// perSecond is c spread over d, in milliseconds per second.
func perSecond(c, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 1000 * c.Seconds() / d.Seconds()
}

// fmtRecycled is a process's instances recycled, by reason.
func fmtRecycled(m map[string]float64) string {
	return fmt.Sprintf("%.0f idle, %.0f after calls, %.0f for memory", m["idle"], m["calls"], m["memory"])
}

// annotationShardPlan is operator.AnnotationShardPlan: the balancing plan
// a replica follows, in its Lease.
const annotationShardPlan = "wasmreconcile.io/shard-plan"

// balancedAs is every replica of procs once balanced (cached, in procs'
// order, the Widgets each held), the one that held the most first, each
// with the slots it worked on and the plan its Lease carries.
func balancedAs(ctx context.Context, cp *controlPlane, procs []*proc, cached []float64) ([]*aloneAs, error) {
	cs, err := kubernetes.NewForConfig(cp.config)
	if err != nil {
		return nil, err
	}
	order := make([]int, len(procs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return cached[order[a]] > cached[order[b]] })
	var out []*aloneAs
	for _, i := range order {
		p := procs[i]
		m, err := p.scrape("wasmreconcile_shard_slots")
		if err != nil {
			return nil, err
		}
		l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, "wasmreconcile-operator-"+p.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading %s's Lease: %w", p.name, err)
		}
		out = append(out, &aloneAs{identity: p.name, slots: m["wasmreconcile_shard_slots"], plan: l.Annotations[annotationShardPlan]})
	}
	return out, nil
}

// waitSlots waits (up to 2 min) until p works on slots slots.
func waitSlots(ctx context.Context, p *proc, slots float64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, err := p.scrape("wasmreconcile_shard_slots")
		if err == nil && m["wasmreconcile_shard_slots"] == slots {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s works on %v slots after 2 min, not the %v it worked on balanced", p.name, m["wasmreconcile_shard_slots"], slots)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}
