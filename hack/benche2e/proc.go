package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
)

// proc is a controller process started by the driver: the operator or a
// native controller.
type proc struct {
	name      string
	cmd       *exec.Cmd
	log       string // file holding its stdout and stderr
	metrics   string // host:port of /metrics
	probe     string // host:port of /readyz
	done      chan struct{}
	waitErr   error
	logFile   *os.File
	stopped   bool
	startedAt time.Time

	bin         string
	args        func(metrics, probe string) []string
	env         []string // added to the driver's environment
	portRetries int
}

// startProc starts bin with args, which must include the metrics and probe
// addresses it is given through addrs (two free loopback addresses). The
// process gets SIGKILL if the driver dies (Pdeathsig) and a process group of
// its own, so that a Ctrl-C reaches the driver only, which stops it.
func startProc(name, bin string, args func(metrics, probe string) []string, logPath string, env ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, log: logPath, bin: bin, args: args, logFile: f, env: env}
	if err := p.start(); err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

// start starts the process on two new free addresses.
func (p *proc) start() error {
	var err error
	if p.metrics, err = freeAddr(); err != nil {
		return err
	}
	if p.probe, err = freeAddr(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	p.cmd = exec.Command(p.bin, p.args(p.metrics, p.probe)...)
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logFile, p.logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.startedAt = time.Now()
	done := p.done
	cmd := p.cmd
	go func() {
		p.waitErr = cmd.Wait()
		close(done)
	}()
	return nil
}

// restartIfPortTaken starts the process again, on other addresses, if it
// exited because one of its ports was taken between freeAddr and its bind
// (an outgoing connection may get the same ephemeral port); at most three
// times. It reports whether it did.
func (p *proc) restartIfPortTaken() bool {
	if p.portRetries >= 3 || !strings.Contains(tail(p.log, 5), "address already in use") {
		return false
	}
	p.portRetries++
	fmt.Fprintf(p.logFile, "benche2e: a port was taken; starting %s again on other ports\n", p.name)
	return p.start() == nil
}

// pid is the process's id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited returns an error when the process has exited, with the tail of its
// log.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); the end of its log %s:\n%s", p.name, p.waitErr, p.log, tail(p.log, 20))
	default:
		return nil
	}
}

// stop stops the process: SIGTERM, then SIGKILL after 10 s. It is safe to
// call more than once.
func (p *proc) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.logFile.Close()
}

// waitReady waits until the process's /readyz answers 200 (its caches have
// synced).
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if err := p.exited(); err != nil {
			if p.restartIfPortTaken() {
				continue
			}
			return err
		}
		resp, err := client.Get("http://" + p.probe + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; the end of its log %s:\n%s", p.name, timeout, p.log, tail(p.log, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrape returns, summed over their label sets, the values of the metrics
// named in names on the process's /metrics, fetched once. A name may
// select series: "metric|labels" sums the series of metric whose labels
// contain labels (such as `state="loaded"`), under that key.
func (p *proc) scrape(names ...string) (map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	type selector struct{ key, labels string }
	want := map[string][]selector{}
	for _, n := range names {
		metric, labels, _ := strings.Cut(n, "|")
		want[metric] = append(want[metric], selector{key: n, labels: labels})
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		sels := want[name]
		if len(sels) == 0 {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		for _, sel := range sels {
			if sel.labels == "" || strings.Contains(line, sel.labels) {
				out[sel.key] += v
			}
		}
	}
	return out, sc.Err()
}

// scrapeSeries sums the samples of metric name whose line contains
// labels (such as `state="loaded"`).
func (p *proc) scrapeSeries(name, labels string) (float64, error) {
	m, err := p.scrape(name + "|" + labels)
	return m[name+"|"+labels], err
}

// saveHeapProfile writes the heap profile served at addr (net/http/pprof)
// to path, after a collection (?gc=1).
func saveHeapProfile(addr, path string) error {
	return saveProfile("heap profile", "http://"+addr+"/debug/pprof/heap?gc=1", 30*time.Second, path)
}

// saveCPUProfile profiles the CPU of the process serving pprof at addr for
// d and writes the profile to path.
func saveCPUProfile(addr string, d time.Duration, path string) error {
	url := "http://" + addr + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Seconds()))
	return saveProfile("CPU profile", url, d+30*time.Second, path)
}

// saveTrace records an execution trace of the process serving pprof at
// addr for d and writes it to path.
func saveTrace(addr string, d time.Duration, path string) error {
	url := "http://" + addr + "/debug/pprof/trace?seconds=" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	return saveProfile("execution trace", url, d+30*time.Second, path)
}

// saveProfile writes what url answers to path. An answer other than 200 is
// an error that quotes the server, never a file that looks like a profile.
func saveProfile(what, url string, timeout time.Duration, path string) error {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s answered %s: %s", what, url, resp.Status, bytes.TrimSpace(b))
	}
	return os.WriteFile(path, b, 0o644)
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}()

// cpuTime returns the CPU time (user and system, all threads) process pid
// has used, with that of its children it has waited for: the operator
// compiles modules in worker processes (engine.CompileWorker), whose CPU
// is the operator's cost too.
func cpuTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 15 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks float64
	for _, f := range fields[11:15] { // fields 14-17 of stat: utime, stime, cutime, cstime
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks / clockTicks * float64(time.Second)), nil
}

// threadCPU returns the CPU time of each thread of process pid, by thread
// id, in nanoseconds (/proc/PID/task/TID/schedstat: the scheduler's own
// count, not /proc/PID/stat's 10 ms ticks). Idle CPU is a few ticks or
// none, where ticks cannot tell 1× from 3×.
func threadCPU(pid int) (map[int]time.Duration, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]time.Duration, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/task/%d/schedstat: %w", pid, tid, err)
		}
		out[tid] = time.Duration(ns)
	}
	return out, nil
}

// threadCPUSince is the CPU the threads of pid used since before (from
// threadCPU): a thread that started since counts from zero; one that
// exited since is not counted (rare when a process is idle).
func threadCPUSince(pid int, before map[int]time.Duration) (time.Duration, error) {
	now, err := threadCPU(pid)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	for tid, ns := range now {
		d += ns - before[tid]
	}
	return d, nil
}

// memory returns process pid's resident set (VmRSS) and its peak (VmHWM),
// in bytes.
func memory(pid int) (rss, hwm int64, err error) {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val) // "123456 kB"
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}

// residentByKind splits the resident set of pid by kind of mapping, from
// /proc/PID/smaps: anonymous writable (the Go heap, guest linear memories,
// stacks), compiled guest code (anonymous executable, or the engine's files
// in wasmreconcile-code/) and file-backed (the binary), for telling where a
// process's memory is.
func residentByKind(pid int) (anonRW, guestCode, file int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps"))
	if err != nil {
		return 0, 0, 0, err
	}
	kind := 0 // 1 anon rw, 2 anon exec, 3 file
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4: // a mapping's header
			switch anon := len(f) == 5 || strings.HasPrefix(f[5], "["); {
			case !anon && f[1][2] == 'x' && strings.Contains(f[5], "/wasmreconcile-code/"):
				kind = 2
			case !anon:
				kind = 3
			case f[1][2] == 'x':
				kind = 2
			case f[1][1] == 'w':
				kind = 1
			default:
				kind = 0
			}
		case len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch kind {
			case 1:
				anonRW += kb << 10
			case 2:
				guestCode += kb << 10
			case 3:
				file += kb << 10
			}
		}
	}
	return anonRW, guestCode, file, nil
}

// pidsWithArgPrefix returns the processes whose command line holds an
// argument --flag=VALUE whose value starts with prefix (the control plane's
// processes carry its directory in their arguments).
func pidsWithArgPrefix(prefix string) []int {
	return controlplane.ProcessesWithArg(func(a string) bool {
		i := strings.IndexByte(a, '=')
		return i >= 0 && strings.HasPrefix(a[i+1:], prefix)
	})
}

// freeAddr returns a loopback address with a free port, never one it
// returned before in this run.
func freeAddr() (string, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		l.Close()
		if _, used := handedOut.LoadOrStore(addr, true); !used {
			return addr, nil
		}
	}
	return "", fmt.Errorf("no free loopback port not handed out before")
}

var handedOut sync.Map // of string

// tail returns the last n lines of file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// sayResident logs where p's resident set goes: by mapping (/proc smaps)
// and, of the Go heap, what is live, what is free and still resident, and
// what was returned (the Go collector's memstats on p's /metrics).
func (b *bench) sayResident(label string, p *proc) {
	rw, x, file, err := residentByKind(p.pid())
	if err != nil {
		return
	}
	m, err := p.scrape("go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes")
	if err != nil {
		return
	}
	b.say("%s: resident %.1f MiB anonymous writable, %.1f MiB compiled guest code, %.1f MiB file-backed (the binary); Go heap in use %.1f MiB, free and not returned %.1f MiB, stacks %.1f MiB, runtime total %.1f MiB",
		label, mib(rw), mib(x), mib(file), mib(int64(m["go_memstats_heap_inuse_bytes"])),
		mib(int64(m["go_memstats_heap_idle_bytes"]-m["go_memstats_heap_released_bytes"])),
		mib(int64(m["go_memstats_stack_inuse_bytes"])), mib(int64(m["go_memstats_sys_bytes"])))
}
