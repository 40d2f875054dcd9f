package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// CandidateSpec is a candidate version of a module: called beside the
// serving version on the same requests, compared with it, never applied
// (package shadow).
type CandidateSpec struct {
	// Source fetches the candidate's bytes. Required.
	Source source.Fetcher
	// SHA256, when set, pins the bytes: hex, optionally prefixed "sha256:".
	SHA256 string
	// Shadow configures the candidate's workers, queue and allowed
	// differences; its Observe is set by the supervisor (the
	// wasmreconcile_shadow_comparisons_total metric).
	Shadow shadow.Options
}

// CandidateStatus is a running candidate.
type CandidateStatus struct {
	// Digest is the candidate's "sha256:<hex>".
	Digest string
	// Since is when the candidate started to be compared.
	Since time.Time
	// Stats are its comparisons so far.
	Stats shadow.Stats
	// Canary describes the share of objects it serves; "" for none.
	Canary string
}

// CandidateError reports a candidate that cannot run beside the serving
// version: it could not be fetched or loaded, or it is not the same module
// (name, kinds, triggers, finalizer). The serving version is untouched.
type CandidateError struct {
	Module, Source string
	Err            error
}

func (e *CandidateError) Error() string {
	return fmt.Sprintf("module[%s] candidate from %s: %v", e.Module, e.Source, e.Err)
}

func (e *CandidateError) Unwrap() error { return e.Err }

// candidate is a module's running candidate. Its version is the shadow's
// alone unless the module's versions also hold it (a promotion).
type candidate struct {
	key     string // digest + limits, as Apply keys versions
	digest  string
	version *versionslot.Version
	shadow  *shadow.Shadow
	opts    shadow.Options // as given, without Observe
	since   time.Time
}

// SetCandidate runs spec's module beside module name's serving version, in
// place of any candidate before, or stops the candidate (nil spec). The
// candidate runs under the serving spec's limits (so that its answer is the
// one it would give serving, and its compiled code serves at once if it is
// promoted) in its own workers and queue. The same bytes and options keep
// the running candidate and its counts. It returns the candidate's digest;
// an error is a *CandidateError, and leaves no candidate running.
//
// It runs in three steps, the slow ones outside s.mu: fetch and verify
// the bytes, find or compile their version, and install it (checked
// against the serving version, which may have changed meanwhile).
func (s *Supervisor) SetCandidate(ctx context.Context, name string, spec *CandidateSpec) (string, error) {
	s.mu.Lock()
	r := s.modules[name]
	if r == nil {
		s.mu.Unlock()
		return "", &CandidateError{Module: name, Source: sourceOf(spec), Err: errors.New("the module does not run; a candidate needs a serving version")}
	}
	if spec == nil {
		s.rollout.end(r, dropped, nil)
		s.mu.Unlock()
		return "", nil
	}
	limits := r.spec.Policy.Limits // merged by Apply
	s.mu.Unlock()

	fail := func(err error) (string, error) {
		s.mu.Lock()
		if r := s.modules[name]; r != nil {
			s.rollout.end(r, dropped, nil)
		}
		s.mu.Unlock()
		return "", &CandidateError{Module: name, Source: spec.Source.String(), Err: err}
	}
	c, wasm, err := fetchCandidate(ctx, spec, limits)
	if err != nil {
		return fail(err)
	}
	running, owned, err := s.candidateVersion(ctx, name, c, wasm, limits)
	switch {
	case err != nil:
		return fail(err)
	case running:
		return c.digest, nil
	}
	if err := s.installCandidate(name, c, spec.Source.String()); err != nil {
		if owned {
			_ = c.version.Module.Close(ctx)
		}
		return fail(err)
	}
	return c.digest, nil
}

// fetchCandidate reads spec's bytes, verifies them against spec.SHA256 and
// the differences it allows, and returns the candidate they make (no
// version yet) and the bytes.
func fetchCandidate(ctx context.Context, spec *CandidateSpec, limits engine.Limits) (*candidate, []byte, error) {
	if err := compare.Allowed(spec.Shadow.AllowDifferences); err != nil {
		return nil, nil, err
	}
	wasm, err := spec.Source.Fetch(ctx)
	if err != nil {
		return nil, nil, err
	}
	digest := Digest(wasm)
	if want, ok := pinned(digest, spec.SHA256); !ok {
		return nil, nil, fmt.Errorf("the bytes' digest is %s, not the pinned %s; fix the candidate's sha256 or its source", digest, want)
	}
	c := &candidate{key: fmt.Sprintf("%s/%+v", digest, limits), digest: digest, opts: spec.Shadow, since: time.Now()}
	c.opts.Observe = nil
	return c, wasm, nil
}

// candidateVersion sets c.version: module name's kept version of the same
// key (it served before; shared, not owned), the running candidate's (the
// same bytes, other options), or a new compile of wasm (owned: the caller
// closes it if the candidate is not installed). running is true when the
// running candidate has c's key and options already: nothing changes.
// An error is the caller's to wrap.
func (s *Supervisor) candidateVersion(ctx context.Context, name string, c *candidate, wasm []byte, limits engine.Limits) (running, owned bool, err error) {
	s.mu.Lock()
	r := s.modules[name]
	if r == nil {
		s.mu.Unlock()
		return false, false, errors.New("the module stopped while its candidate loaded")
	}
	if s.rollout.current(r, c) {
		s.mu.Unlock()
		return true, false, nil
	}
	c.version = s.rollout.compiled(r, c.key)
	s.mu.Unlock()
	if c.version != nil {
		return false, false, nil
	}
	m, err := s.opts.Engine.Load(ctx, name+" candidate", wasm, limits)
	if err != nil {
		return false, false, err
	}
	c.version = versionslot.New(m)
	return false, true, nil
}

// installCandidate makes c module name's candidate (rollout.install), if
// the module still serves.
func (s *Supervisor) installCandidate(name string, c *candidate, source string) error {
	s.mu.Lock()
	r := s.modules[name]
	var serving *versionslot.Version
	if r != nil && !s.closed {
		serving = r.slot.Current()
	}
	if serving == nil {
		s.mu.Unlock()
		return errors.New("the module stopped while its candidate loaded")
	}
	if err := s.rollout.install(name, r, c, serving); err != nil {
		s.mu.Unlock()
		return err
	}
	servingDigest := serving.Module.Digest()
	s.mu.Unlock()
	s.opts.Log.Info("candidate running beside the serving version", "module", name, "source", source, "digest", c.digest,
		"serving", servingDigest)
	return nil
}

// Candidate returns module name's running candidate.
func (s *Supervisor) Candidate(name string) (CandidateStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[name]
	if r == nil {
		return CandidateStatus{}, false
	}
	return s.rollout.status(r)
}

func sourceOf(spec *CandidateSpec) string {
	if spec == nil || spec.Source == nil {
		return "(none)"
	}
	return spec.Source.String()
}
