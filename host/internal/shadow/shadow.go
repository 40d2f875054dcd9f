// Package shadow runs a candidate version of a module beside the serving
// one: for every call of the serving version, the candidate is called on
// the same request bytes, in the background, and its answer is compared
// with the serving one (Compare). Nothing the candidate returns is ever
// applied: a Shadow has no client, only the candidate's code and the
// comparison.
//
// A Shadow has its own workers and queue (Options.MaxConcurrent,
// Options.QueueSize), so the serving path only pays for handing a job over:
// when the queue is full the job is dropped and counted as skipped, never
// waited for.
package shadow

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// Options configure a Shadow. Zero fields take the stated defaults.
type Options struct {
	// MaxConcurrent is how many candidate calls run at once. Defaults to 1.
	MaxConcurrent int
	// QueueSize is how many comparisons may wait for a worker; more are
	// dropped and counted as skipped. Defaults to 100.
	QueueSize int
	// AllowDifferences are field paths whose differences are expected (see
	// compare.Allowed). Defaults to none.
	AllowDifferences []string
	// KeepDifferences is how many differing calls are kept to show, the
	// first ones. Defaults to 5.
	KeepDifferences int
	// Observe, when set, is called with each comparison's result: "agree",
	// "differ", "candidate_error" or "skipped". Defaults to nil.
	Observe func(result string)
	// Canary, when set, is the share of objects the candidate serves
	// (Serves): their calls go to the candidate, whose answers are applied,
	// and are not compared. Defaults to nil: the candidate serves nothing.
	Canary *Canary
}

// Canary is a share of objects: a stable Percent of them by their
// namespace and name (InShare), or those a Selector matches. One of the
// two is set.
type Canary struct {
	// Percent, 1 to 100, of objects by a stable hash of namespace/name: the
	// same objects on every replica and after every restart, and raising
	// it only adds objects.
	Percent int
	// Selector matches the objects by their labels.
	Selector labels.Selector
}

// String describes the share: "25% of objects" or "objects matching
// canary=true".
func (c *Canary) String() string {
	if c == nil {
		return ""
	}
	if c.Selector != nil {
		return "objects matching " + c.Selector.String()
	}
	return fmt.Sprintf("%d%% of objects", c.Percent)
}

// InShare reports whether the object namespace/name is in a stable percent
// of objects: FNV-1a of "namespace/name" modulo 100 is below percent.
func InShare(namespace, name string, percent int) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + name))
	return int(h.Sum32()%100) < percent
}

// Serves reports whether the candidate serves obj (Options.Canary).
func (s *Shadow) Serves(obj *unstructured.Unstructured) bool {
	c := s.opts.Canary
	if c == nil {
		return false
	}
	if c.Selector != nil {
		return c.Selector.Matches(labels.Set(obj.GetLabels()))
	}
	return InShare(obj.GetNamespace(), obj.GetName(), c.Percent)
}

// Acquire returns the candidate to serve one canary call, and the func to
// call when the call and its writes are done; false once the Shadow is
// closed. Close waits for every acquired call to be released.
func (s *Shadow) Acquire() (*engine.Module, func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, false
	}
	s.wg.Add(1)
	var once sync.Once
	return s.module, func() { once.Do(s.wg.Done) }, true
}

// Served counts a call of a canary object by the candidate, or of another
// object by the serving version, while a canary is set.
func (s *Shadow) Served(byCandidate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if byCandidate {
		s.stats.ServedByCandidate++
	} else {
		s.stats.ServedByServing++
	}
}

func (o Options) withDefaults() Options {
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = 1
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 100
	}
	if o.KeepDifferences <= 0 {
		o.KeepDifferences = 5
	}
	return o
}

// Job is one serving call to repeat on the candidate.
type Job struct {
	// Object names the reconciled object, "namespace/name", for the
	// differences shown.
	Object string
	// Call names the call, for the candidate's errors.
	Call string
	// Owner is the reconciled object, to decode the candidate's response.
	Owner map[string]any
	// Request is the request bytes the serving version was called with.
	Request []byte
	// Reads serves the candidate's cache reads (the serving call's
	// reader: the same rules and identity).
	Reads engine.CacheReader
	// Serving is the serving version's answer.
	Serving compare.Answer
	// Secrets has learned the Secrets the serving call saw; those the
	// candidate reads or answers are learned too, and every value is
	// scrubbed from the differences shown (Stats.FirstDifferences).
	// Defaults to an empty Scrubber. The job owns it.
	Secrets *redact.Scrubber
}

// Decoder decodes a response for the module's rules: protocol.Rules.Decode
// and the completed children.
type Decoder func(call string, owner map[string]any, requestBytes int, output []byte) (compare.Answer, error)

// Stats are a Shadow's counts since it started.
type Stats struct {
	Agreements, Differences, CandidateErrors, Skipped int64
	// FirstDifferences are the first differing or failing calls, each as
	// "namespace/name: PATH: SERVING → CANDIDATE; …".
	FirstDifferences []string
	// CandidateFuel is the fuel of the candidate's last call.
	CandidateFuel uint64
	// ServedByCandidate and ServedByServing count the calls of a canary:
	// of its objects by the candidate, of the others by the serving
	// version.
	ServedByCandidate, ServedByServing int64
}

// AddCounts adds o's counts (agreements, differences, errors, skipped
// and canary calls) to s, as the replicas of a sharded group add theirs.
// Each sum saturates at the largest int64 rather than wrap: a count
// that wrapped negative would let differences or errors pass for none.
func (s *Stats) AddCounts(o Stats) {
	s.Agreements = addSaturating(s.Agreements, o.Agreements)
	s.Differences = addSaturating(s.Differences, o.Differences)
	s.CandidateErrors = addSaturating(s.CandidateErrors, o.CandidateErrors)
	s.Skipped = addSaturating(s.Skipped, o.Skipped)
	s.ServedByCandidate = addSaturating(s.ServedByCandidate, o.ServedByCandidate)
	s.ServedByServing = addSaturating(s.ServedByServing, o.ServedByServing)
}

// addSaturating is a+b, held at the int64 bounds.
func addSaturating(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// Shadow runs one candidate. It is safe for concurrent use.
type Shadow struct {
	module *engine.Module
	decode Decoder
	opts   Options

	jobs   chan Job
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	stats  Stats
}

// New starts a Shadow calling module, whose answers decode decodes. Close
// it to stop its workers.
func New(module *engine.Module, decode Decoder, opts Options) *Shadow {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shadow{module: module, decode: decode, opts: opts, jobs: make(chan Job, opts.QueueSize), ctx: ctx, cancel: cancel}
	for i := 0; i < opts.MaxConcurrent; i++ {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Module is the candidate.
func (s *Shadow) Module() *engine.Module { return s.module }

// Options are the options the Shadow runs with.
func (s *Shadow) Options() Options { return s.opts }

// Submit hands a job to the candidate without waiting: it returns false,
// and counts the job as skipped, when the queue is full or the Shadow is
// closed.
func (s *Shadow) Submit(j Job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		select {
		case s.jobs <- j:
			return true
		default:
		}
	}
	s.stats.Skipped++
	s.observe("skipped")
	return false
}

func (s *Shadow) observe(result string) {
	if s.opts.Observe != nil {
		s.opts.Observe(result)
	}
}

// Stats returns the counts so far.
func (s *Shadow) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.FirstDifferences = append([]string(nil), s.stats.FirstDifferences...)
	return st
}

// Close stops the workers, abandoning the calls running (they are not
// counted), and waits for them and for the canary calls acquired. It does
// not close the module.
func (s *Shadow) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.jobs)
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

func (s *Shadow) work() {
	defer s.wg.Done()
	for j := range s.jobs {
		if s.ctx.Err() != nil {
			continue // closing: drain without calling
		}
		s.run(j)
	}
}

func (s *Shadow) run(j Job) {
	sc := j.Secrets
	if sc == nil {
		sc = &redact.Scrubber{}
	}
	ctx := s.ctx
	if j.Reads != nil {
		ctx = engine.WithCacheReader(ctx, &learningReader{CacheReader: j.Reads, secrets: sc})
	}
	call := j.Call + " (candidate)"
	res, err := s.module.Reconcile(ctx, call, j.Request)
	if s.ctx.Err() != nil {
		return // abandoned by Close: no verdict
	}
	var cand compare.Answer
	if err == nil {
		cand, err = s.decode(call, j.Owner, len(j.Request), res.Output)
	}
	if err != nil {
		cand = compare.Answer{Kind: protocol.KindOf(err), Err: err.Error()}
	}
	verdict, lines := compare.Compare(j.Serving, cand, s.opts.AllowDifferences)
	sc.LearnAll(j.Serving.Children...)
	sc.LearnAll(cand.Children...)
	for i, l := range lines {
		lines[i] = sc.String(l)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.CandidateFuel = res.Fuel
	switch verdict {
	case compare.Agree:
		s.stats.Agreements++
	case compare.Differ:
		s.stats.Differences++
	case compare.CandidateError:
		s.stats.CandidateErrors++
	}
	if verdict != compare.Agree && len(s.stats.FirstDifferences) < s.opts.KeepDifferences {
		shown := lines
		if len(shown) > 3 {
			shown = append(append([]string(nil), lines[:3]...), fmt.Sprintf("and %d more", len(lines)-3))
		}
		msg := j.Object + ": "
		for i, l := range shown {
			if i > 0 {
				msg += "; "
			}
			msg += l
		}
		s.stats.FirstDifferences = append(s.stats.FirstDifferences, protocol.Truncate(msg, 1024))
	}
	s.observe(verdict.String())
}

// learningReader is the candidate's cache reader: it learns the Secrets
// the candidate reads, to scrub them from its differences. The guest reads
// on the calling goroutine.
type learningReader struct {
	engine.CacheReader
	secrets *redact.Scrubber
}

func (l *learningReader) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	st, b := l.CacheReader.Read(ctx, request)
	if st == abi.CacheOK {
		var one map[string]any
		if json.Unmarshal(b, &one) == nil {
			l.secrets.Learn(one)
		} else {
			var list []map[string]any
			if json.Unmarshal(b, &list) == nil {
				l.secrets.LearnAll(list...)
			}
		}
	}
	return st, b
}
