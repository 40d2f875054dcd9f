// Package flightrecorder keeps, per module, the last failed guest calls and
// a sample of successful ones, in memory and bounded in bytes, each with
// what is needed to replay it offline exactly: the request the guest saw,
// the objects it read through cache_read, what it answered (or how it
// failed), its fuel and time. A kept call is run once more, off the
// serving path, on a fresh instance of the same version with the same
// input (package offline): that is what `operator test` will reproduce,
// and its fuel is what the case pins. Secrets' data are redacted first,
// by default.
//
// Handler serves the records as JSON; `operator record` turns them into
// `operator test` case files.
package flightrecorder

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Options bound what is kept. Zero fields take the stated defaults. The
// operator's Options.FlightRecorder is this type (an alias).
type Options struct {
	// Disabled records nothing: the operator creates no recorder. New
	// ignores it. Defaults to false.
	Disabled bool
	// Failures is how many failed calls are kept per module, the last
	// ones. Defaults to 20.
	Failures int
	// Successes is how many successful calls are kept per module, the last
	// sampled ones. Defaults to 20.
	Successes int
	// SampleEvery keeps one successful call in SampleEvery (the first one
	// always). Defaults to 100.
	SampleEvery int
	// SampleInterval keeps at most one sampled successful call per
	// module in this long: each kept call is replayed on a fresh instance
	// (a new instance costs several calls' CPU), so that under heavy
	// traffic one in SampleEvery was 4% of the operator's CPU at 10,000
	// objects (docs/benchmarks.md), for records that replace each other.
	// Failures are always kept. Defaults to 10 seconds; negative: no cap.
	SampleInterval time.Duration
	// MaxBytes bounds the records kept per module (their inputs and
	// answers); the oldest successes, then the oldest failures, go first.
	// Defaults to 8 MiB.
	MaxBytes int
	// KeepSecrets keeps Secrets' data and stringData in recorded inputs.
	// Defaults to false: each value is replaced by REDACTED (base64 for
	// data), so that the records, readable through Handler, hold no
	// credential.
	KeepSecrets bool
	// QueueSize bounds the calls waiting for their replay run; more are
	// dropped. Defaults to 64.
	QueueSize int
}

// Defaults of Options.
const (
	DefaultFailures    = 20
	DefaultSuccesses   = 20
	DefaultSampleEvery = 100
	// DefaultSampleInterval is Options.SampleInterval's default.
	DefaultSampleInterval = 10 * time.Second
	DefaultMaxBytes       = 8 << 20
	DefaultQueueSize      = 64
)

func (o Options) withDefaults() Options {
	if o.Failures <= 0 {
		o.Failures = DefaultFailures
	}
	if o.Successes <= 0 {
		o.Successes = DefaultSuccesses
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = DefaultSampleEvery
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	return o
}

// Call is one guest call handed to the recorder.
type Call struct {
	Module *engine.Module
	// Object is "namespace/name" (or "name").
	Object string
	// Input is the request the guest saw.
	Input abi.Request
	// Reads are the objects cache_read returned to the guest.
	Reads []map[string]any
	// Output is the guest's answer; nil when the call failed before one.
	Output []byte
	// Err is how the call failed (the guest's own error included); nil on
	// success.
	Err error
	// Fuel and Duration are the call's.
	Fuel     uint64
	Duration time.Duration
	// Refused are the children of the answer the host could not write
	// (the API server refused them, or their name is taken), and ApplyErr
	// the error that ended the apply (the status refused, say): what
	// offline checks do not see. A call with either is kept as a failure.
	Refused  []abi.ChildFailure
	ApplyErr error
	// ReadLog is every cache_read of the call and how it ended, so that a
	// replay can tell a read production made (and answered NotFound) from
	// one it never made. nil: not logged.
	ReadLog []Read
	// ReadNamespaces and Scopes are the reads' rules, for the replay run.
	ReadNamespaces []string
	Scopes         protocol.Scopes
	// Release, when set, is called once the recorder is done with Module
	// (replayed, or dropped): the caller holds Module open until then.
	Release func()
	// At is when the call was made. Defaults to when it is offered.
	At time.Time
}

func (c Call) at() time.Time { return c.At.UTC() }

func (c Call) release() {
	if c.Release != nil {
		c.Release()
	}
}

// Read is one cache_read of a call and how it ended.
type Read struct {
	Request abi.CacheRequest
	Status  abi.CacheStatus
}

// statusNames name abi.CacheStatus values in records.
var statusNames = map[abi.CacheStatus]string{abi.CacheOK: "OK", abi.CacheNotFound: "NotFound", abi.CacheForbidden: "Forbidden",
	abi.CacheBadRequest: "BadRequest", abi.CacheUnavailable: "Unavailable", abi.CacheError: "Error"}

// Record is one kept call.
type Record struct {
	Module   string          `json:"module"`
	Digest   string          `json:"digest"`
	Object   string          `json:"object"`
	At       time.Time       `json:"at"`
	Input    abi.Request     `json:"input"`
	Kind     protocol.Kind   `json:"kind"`
	Error    string          `json:"error,omitempty"`
	Response json.RawMessage `json:"response,omitempty"`
	Fuel     uint64          `json:"fuel"`
	Duration float64         `json:"durationSeconds"`
	// Replay is the same input run offline on a fresh instance.
	ReplayKind  protocol.Kind `json:"replayKind"`
	ReplayError string        `json:"replayError,omitempty"`
	ReplayFuel  uint64        `json:"replayFuel"`
	// ReplayResponse is the replay's answer when it differs from Response.
	ReplayResponse json.RawMessage `json:"replayResponse,omitempty"`
	Redacted       bool            `json:"redacted,omitempty"`
	// Refused and ApplyError are Call.Refused and Call.ApplyErr: what the
	// host could not write of the answer.
	Refused    []abi.ChildFailure `json:"refused,omitempty"`
	ApplyError string             `json:"applyError,omitempty"`
	// Reads are the call's cache reads (Call.ReadLog); nil when not logged.
	Reads []modtest.RecordedRead `json:"reads,omitzero"`

	size int
}

// failed reports whether rec is kept among the failures: the call failed,
// or the host could not write all of its answer.
func (rec Record) failed() bool {
	return rec.Kind != protocol.Success || len(rec.Refused) > 0 || rec.ApplyError != ""
}

// Recorder keeps records. It is safe for concurrent use.
type Recorder struct {
	opts  Options
	queue chan Call

	mu        sync.Mutex
	modules   map[string]*store
	forgotten map[string]time.Time // modules removed, and when: their calls made before are not kept
	closed    bool
	wg        sync.WaitGroup
	cancel    context.CancelFunc
	ctx       context.Context
}

type store struct {
	failures, successes []Record
	seen                int       // successes offered, for sampling
	sampled             time.Time // when the last success was sampled
	bytes               int
}

// New starts a Recorder; Close stops it.
func New(opts Options) *Recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{opts: opts.withDefaults(), modules: map[string]*store{}, forgotten: map[string]time.Time{}, ctx: ctx, cancel: cancel}
	r.queue = make(chan Call, r.opts.QueueSize)
	r.wg.Add(1)
	go r.work()
	return r
}

// Wants reports whether a call of module that ended as failed would be
// kept: every failure, and one success in Options.SampleEvery, at most one
// per Options.SampleInterval. The reconciler asks before it copies a
// call's input.
func (r *Recorder) Wants(module string, failed bool) bool {
	return r.wants(module, failed, time.Now())
}

func (r *Recorder) wants(module string, failed bool, now time.Time) bool {
	if r == nil {
		return false
	}
	if failed {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.storeOf(module)
	s.seen++
	if (s.seen-1)%r.opts.SampleEvery != 0 {
		return false
	}
	if r.opts.SampleInterval > 0 && !s.sampled.IsZero() && now.Sub(s.sampled) < r.opts.SampleInterval {
		return false
	}
	s.sampled = now
	return true
}

// Offer hands a call to the recorder without waiting; it is dropped (and
// released) when the replay queue is full or the recorder is closed.
func (r *Recorder) Offer(c Call) {
	if r == nil {
		return
	}
	if c.At.IsZero() {
		c.At = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.release()
		return
	}
	select {
	case r.queue <- c:
	default:
		c.release()
	}
}

// Close stops the replay worker; calls queued are dropped and released.
func (r *Recorder) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

func (r *Recorder) storeOf(module string) *store {
	s := r.modules[module]
	if s == nil {
		s = &store{}
		r.modules[module] = s
	}
	return s
}

func (r *Recorder) work() {
	defer r.wg.Done()
	for c := range r.queue {
		if r.ctx.Err() != nil {
			c.release()
			continue
		}
		rec := r.replay(c)
		c.release()
		r.keep(rec)
	}
}

// replay builds c's record: the input redacted, then run on a fresh
// instance with the reads served from what the guest read; and what
// production and the replay answered, redacted with what the input taught
// the scrubber.
func (r *Recorder) replay(c Call) Record {
	in := c.Input
	in.Related = append(append([]map[string]any(nil), in.Related...), c.Reads...)
	in.Related = dedupe(in, in.Related)
	var sc *redact.Scrubber
	if !r.opts.KeepSecrets {
		sc = scrubberOf(in, c.Output)
		in = scrubRequest(sc, in)
	}
	rec := Record{Module: c.Module.Name(), Digest: c.Module.Digest(), Object: c.Object, At: c.at(), Input: in,
		Kind: protocol.KindOf(c.Err), Fuel: c.Fuel, Duration: c.Duration.Seconds(), Redacted: sc != nil && !sc.Empty()}
	if c.Err != nil {
		rec.Error = scrubString(sc, c.Err.Error())
	}
	if c.ApplyErr != nil {
		rec.ApplyError = scrubString(sc, c.ApplyErr.Error())
	}
	if c.ReadLog != nil {
		rec.Reads = []modtest.RecordedRead{}
		for _, rd := range c.ReadLog {
			name, ok := statusNames[rd.Status]
			if !ok {
				name = fmt.Sprint(uint32(rd.Status))
			}
			rec.Reads = append(rec.Reads, modtest.RecordedRead{CacheRequest: rd.Request, Status: name})
		}
	}
	for _, f := range c.Refused {
		f.Message = scrubString(sc, f.Message)
		rec.Refused = append(rec.Refused, f)
	}
	if c.Output != nil && json.Valid(c.Output) {
		rec.Response = scrubJSON(sc, c.Output)
	}
	if rec.Kind.Preempted() || rec.Kind == protocol.MemoryLimit || rec.Kind == protocol.MemoryBudgetExceeded {
		// A call stopped for its fuel, its deadline or its memory is not
		// run again: it would take as much CPU or memory again beside the
		// serving path. Out of fuel, a replay uses the whole budget, as
		// production did.
		rec.ReplayKind = rec.Kind
		if rec.Kind == protocol.FuelExhausted {
			rec.ReplayFuel = rec.Fuel
		}
		b, _ := json.Marshal(rec)
		rec.size = len(b)
		return rec
	}
	o := offline.Run(r.ctx, c.Module, in, offline.Options{Fresh: true, Scopes: c.Scopes, ReadNamespaces: c.ReadNamespaces})
	rec.ReplayKind, rec.ReplayFuel = o.Kind(), o.Fuel
	if o.Err != nil {
		rec.ReplayError = scrubString(sc, o.Err.Error())
	}
	if o.Output != nil && json.Valid(o.Output) {
		if out := scrubJSON(sc, o.Output); string(out) != string(rec.Response) {
			rec.ReplayResponse = out
		}
	}
	b, _ := json.Marshal(rec)
	rec.size = len(b)
	return rec
}

// scrubberOf learns the Secrets of a call: those of its request (the
// object, children and related objects it read) and the Secret children
// its answer asked for.
func scrubberOf(in abi.Request, output []byte) *redact.Scrubber {
	sc := &redact.Scrubber{}
	sc.Learn(in.Object)
	sc.LearnAll(in.Children...)
	sc.LearnAll(in.Related...)
	var resp struct {
		Children []map[string]any `json:"children"`
	}
	if json.Unmarshal(output, &resp) == nil {
		sc.LearnAll(resp.Children...)
	}
	return sc
}

// scrubRequest is in with every object scrubbed.
func scrubRequest(sc *redact.Scrubber, in abi.Request) abi.Request {
	in.Object = sc.Object(in.Object)
	in.Children = sc.Objects(in.Children)
	in.Related = sc.Objects(in.Related)
	if in.Config != nil {
		in.Config, _ = sc.Value(in.Config).(map[string]any)
	}
	for i, f := range in.ChildFailures {
		f.Message = sc.String(f.Message)
		in.ChildFailures[i] = f
	}
	return in
}

func scrubString(sc *redact.Scrubber, s string) string {
	if sc == nil {
		return s
	}
	return sc.String(s)
}

func scrubJSON(sc *redact.Scrubber, raw []byte) json.RawMessage {
	if sc == nil {
		return append(json.RawMessage(nil), raw...)
	}
	return sc.JSON(raw)
}

// Forget frees the records of module, which was removed, and drops those
// of its calls still waiting for their replay.
func (r *Recorder) Forget(module string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.modules, module)
	r.forgotten[module] = time.Now().UTC()
}

func (r *Recorder) keep(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.forgotten[rec.Module]; ok && !rec.At.After(t) {
		return // the module was removed after this call
	}
	s := r.storeOf(rec.Module)
	if !rec.failed() {
		s.successes = append(s.successes, rec)
		if len(s.successes) > r.opts.Successes {
			s.bytes -= s.successes[0].size
			s.successes = s.successes[1:]
		}
	} else {
		s.failures = append(s.failures, rec)
		if len(s.failures) > r.opts.Failures {
			s.bytes -= s.failures[0].size
			s.failures = s.failures[1:]
		}
	}
	s.bytes += rec.size
	for s.bytes > r.opts.MaxBytes && len(s.successes)+len(s.failures) > 0 {
		if len(s.successes) > 0 {
			s.bytes -= s.successes[0].size
			s.successes = s.successes[1:]
		} else {
			s.bytes -= s.failures[0].size
			s.failures = s.failures[1:]
		}
	}
}

// Records returns module's records, failures first, oldest first.
func (r *Recorder) Records(module string) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.modules[module]
	if s == nil {
		return nil
	}
	return append(append([]Record(nil), s.failures...), s.successes...)
}

// Modules lists the modules with records.
func (r *Recorder) Modules() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for m, s := range r.modules {
		if len(s.failures)+len(s.successes) > 0 {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// Path is where the operator serves the records, on its metrics server.
const Path = "/debug/flightrecorder"

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// MayRead, when set, reports whether the client of req may read the
	// objects of gvk in namespace ("" for a cluster-scoped kind): a
	// record is served only to a client that may read the object it
	// records (the records hold it, its children and what the guest
	// read). The operator answers with a SubjectAccessReview of get on
	// the kind. Defaults to nil: every record is served.
	MayRead func(req *http.Request, gvk schema.GroupVersionKind, namespace string) (bool, error)
}

// Handler serves GET Path?module=NAME as {"module": NAME, "cases": [...]}
// (modtest.Case, as Record.Case makes them), and without module the list
// of modules with records. With HandlerOptions.MayRead, only the records
// of objects the client may read are served; "withheld" counts the
// others, and a module none of whose records it may read is 403. Put it
// behind authentication: the records hold the objects the guests saw.
func (r *Recorder) Handler(opts HandlerOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		may := newReadCheck(req, opts.MayRead)
		module := req.URL.Query().Get("module")
		if module == "" {
			var names []string
			for _, m := range r.Modules() {
				if recs, _, err := may.filter(r.Records(m)); err == nil && len(recs) > 0 {
					names = append(names, m)
				}
			}
			if names == nil {
				names = []string{}
			}
			_ = enc.Encode(map[string]any{"modules": names})
			return
		}
		recs := r.Records(module)
		if recs == nil {
			w.WriteHeader(http.StatusNotFound)
			_ = enc.Encode(map[string]any{"error": fmt.Sprintf("no records of module %q; GET %s lists the modules with records", module, Path)})
			return
		}
		allowed, denied, err := may.filter(recs)
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = enc.Encode(map[string]any{"error": "authorizing the records: " + err.Error()})
			return
		}
		if len(allowed) == 0 {
			w.WriteHeader(http.StatusForbidden)
			_ = enc.Encode(map[string]any{"error": fmt.Sprintf("module %q has %d records, of objects you may not read (%s); the records hold those objects: ask for get on them",
				module, len(recs), strings.Join(denied, ", "))})
			return
		}
		out := map[string]any{"module": module, "cases": casesOf(allowed)}
		if n := len(recs) - len(allowed); n > 0 {
			out["withheld"] = n
			out["withheldFrom"] = denied
		}
		_ = enc.Encode(out)
	})
}

// readCheck answers MayRead for one request, once per kind and namespace.
type readCheck struct {
	req     *http.Request
	mayRead func(*http.Request, schema.GroupVersionKind, string) (bool, error)
	seen    map[string]bool
}

func newReadCheck(req *http.Request, mayRead func(*http.Request, schema.GroupVersionKind, string) (bool, error)) *readCheck {
	return &readCheck{req: req, mayRead: mayRead, seen: map[string]bool{}}
}

// filter returns the records the client may read, and, sorted, the
// "kind in namespace" it may not.
func (c *readCheck) filter(recs []Record) ([]Record, []string, error) {
	if c.mayRead == nil {
		return recs, nil, nil
	}
	var out []Record
	denied := map[string]bool{}
	for _, rec := range recs {
		u := unstructured.Unstructured{Object: rec.Input.Object}
		gvk, ns := u.GroupVersionKind(), u.GetNamespace()
		key := gvk.String() + "|" + ns
		ok, seen := c.seen[key]
		if !seen {
			var err error
			if ok, err = c.mayRead(c.req, gvk, ns); err != nil {
				return nil, nil, err
			}
			c.seen[key] = ok
		}
		if ok {
			out = append(out, rec)
			continue
		}
		where := gvk.Kind + " in namespace " + ns
		if ns == "" {
			where = gvk.Kind + " (cluster-scoped)"
		}
		denied[where] = true
	}
	names := make([]string, 0, len(denied))
	for d := range denied {
		names = append(names, d)
	}
	sort.Strings(names)
	return out, names, nil
}

// dedupe drops from related the objects that are the request's object or
// one of its children, and repeats.
func dedupe(in abi.Request, related []map[string]any) []map[string]any {
	seen := map[string]bool{key(in.Object): true}
	for _, c := range in.Children {
		seen[key(c)] = true
	}
	var out []map[string]any
	for _, o := range related {
		k := key(o)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, o)
	}
	return out
}

func key(o map[string]any) string {
	meta, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v|%v|%v|%v", o["apiVersion"], o["kind"], meta["namespace"], meta["name"])
}
