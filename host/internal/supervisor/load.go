package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Digest returns the "sha256:<hex>" digest of wasm.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pinned reports whether digest (Digest's form) is what sha256 pins: any
// digest when sha256 is empty; else sha256's hex, in either case and with
// or without the "sha256:" prefix. want is the pin in Digest's form.
func pinned(digest, sha256 string) (want string, ok bool) {
	if sha256 == "" {
		return "", true
	}
	want = "sha256:" + strings.TrimPrefix(strings.ToLower(sha256), "sha256:")
	return want, want == digest
}

// loader turns a Spec's source into a version ready to serve: it fetches
// the bytes, verifies them against the pinned digest and compiles them
// (on the interpreter first, when one is configured). It holds no state
// of the modules; the Supervisor decides what serves.
type loader struct {
	engine      *engine.Engine
	interpreter *engine.Engine // nil: compile at once
	limits      engine.Limits  // Options.Policy.Limits, under each Spec's
	metrics     *metrics.Metrics
	log         logr.Logger
}

// fetched is a module's verified bytes and the limits it is loaded with.
type fetched struct {
	label  string // the module's name, or its source's base name until the manifest names it
	wasm   []byte
	digest string
	limits engine.Limits
	key    string // digest and limits: a kept version with the same key is reused
}

// labelOf names spec in messages and metrics until its manifest names it:
// "widget.wasm" for "file /m/widget.wasm".
func labelOf(spec Spec) string {
	if spec.Name != "" {
		return spec.Name
	}
	return filepath.Base(spec.Source.String())
}

// fetch reads spec's bytes and verifies them against spec.SHA256. It
// returns a *FetchError or a *DigestMismatchError.
func (l *loader) fetch(ctx context.Context, spec Spec) (fetched, error) {
	f := fetched{label: labelOf(spec)}
	wasm, err := spec.Source.Fetch(ctx)
	if err != nil {
		return f, &FetchError{Module: f.label, Source: spec.Source.String(), Err: err}
	}
	if len(wasm) == 0 {
		return f, &FetchError{Module: f.label, Source: spec.Source.String(), Err: errors.New("no bytes; the source is empty")}
	}
	f.wasm, f.digest = wasm, Digest(wasm)
	if want, ok := pinned(f.digest, spec.SHA256); !ok {
		return f, &DigestMismatchError{Module: f.label, Source: spec.Source.String(), Want: want, Got: f.digest}
	}
	f.limits = policy.MergeLimits(l.limits, spec.Policy.Limits)
	f.key = fmt.Sprintf("%s/%+v", f.digest, f.limits)
	return f, nil
}

// compile loads f's bytes: instrumented and compiled, or on the
// interpreter when one is configured (interpreted is then true and the
// Supervisor compiles in the background). It returns the engine's error,
// naming the module when spec names it.
func (l *loader) compile(ctx context.Context, spec Spec, f fetched) (v *versionslot.Version, took time.Duration, interpreted bool, err error) {
	start := time.Now()
	e := l.engine
	if l.interpreter != nil {
		e, interpreted = l.interpreter, true
	}
	// A compile may take seconds (a worker's limits bound it): say that
	// one started; the "module applied" line says it ended.
	l.log.Info("loading module: instrumenting and compiling", "module", f.label, "source", spec.Source.String(), "digest", f.digest, "bytes", len(f.wasm), "interpreter", interpreted)
	m, err := e.Load(ctx, f.label, f.wasm, f.limits)
	if err != nil {
		if spec.Name == "" {
			return nil, 0, false, err // the engine's error names the source
		}
		return nil, 0, false, fmt.Errorf("module[%s] from %s: %w", f.label, spec.Source, err)
	}
	took = time.Since(start)
	l.metrics.CompileSeconds.WithLabelValues(m.Name()).Observe(took.Seconds())
	return versionslot.New(m), took, interpreted, nil
}

// check refuses a version that cannot serve spec: its manifest names
// another module (*NameMismatchError), spec.Check refuses it, or its
// manifest's ownership does not hold against scopes
// (*engine.InvalidModuleError). spec.Name is set from the manifest when
// empty.
func check(spec *Spec, m *engine.Module, scopes protocol.Scopes) error {
	if spec.Name == "" {
		spec.Name = m.Name()
	}
	if m.Name() != spec.Name {
		return &NameMismatchError{Module: spec.Name, Source: spec.Source.String(), Manifest: m.Name()}
	}
	if spec.Check != nil {
		if err := spec.Check(m); err != nil {
			return err
		}
	}
	if err := protocol.CheckOwnership(m.Manifest(), scopes); err != nil {
		return &engine.InvalidModuleError{Module: m.Name(), Reason: "manifest: " + err.Error(), Hint: "fix the module's manifest (docs/abi.md, \"Manifest\")"}
	}
	return nil
}

// Apply makes spec the running version of module spec.Name. It returns once
// the new version serves (and its objects are being requeued), or with an
// error and the previous version still serving: a *FetchError,
// *DigestMismatchError, *engine.InvalidModuleError, *NameMismatchError,
// *NameConflictError, *KindConflictError, or the error of spec.Check.
//
// The steps: fetch and verify (loader.fetch); reuse a kept version of the
// same bytes and limits, or compile off the hot path while the running
// version serves (loader.compile); check the version against spec; then,
// under the lock, install it (install).
func (s *Supervisor) Apply(ctx context.Context, spec Spec) (Loaded, error) {
	f, err := s.loader.fetch(ctx, spec)
	if err != nil {
		return s.failed(f.label, err)
	}
	loaded := Loaded{Digest: f.digest, Bytes: len(f.wasm)}
	version, name := s.keptVersion(spec.Name, f.key)
	reused, interpreted := version != nil, false
	if reused {
		spec.Name = name
	} else if version, loaded.Compile, interpreted, err = s.loader.compile(ctx, spec, f); err != nil {
		return s.failed(f.label, err)
	}
	// discard refuses the version: a new one is closed, a kept one stays.
	discard := func(err error) (Loaded, error) {
		if !reused {
			_ = version.Module.Close(ctx)
		}
		return s.failed(labelOf(spec), err) // the manifest names the module once checked
	}
	if err := check(&spec, version.Module, protocol.Chain(protocol.MapperScopes(s.opts.Manager.GetRESTMapper()), protocol.Builtin)); err != nil {
		return discard(err)
	}
	if spec.Config == nil {
		spec.Config = s.opts.ModuleConfig[spec.Name]
	}
	if spec.Policy.ReadNamespaces == nil {
		spec.Policy.ReadNamespaces = s.opts.ModuleReadNamespaces[spec.Name]
	}
	spec.Policy = s.opts.Policy.Merge(spec.Policy).WithDefaults() // the policy that serves
	loaded.Name, loaded.At, loaded.Manifest = spec.Name, time.Now(), version.Module.Manifest()
	if err := s.install(spec, f, version, reused, interpreted, &loaded); errors.Is(err, errYielded) {
		if !reused {
			_ = version.Module.Close(ctx)
		}
		loaded.Result = resultYielded
		s.opts.Metrics.Reloads.WithLabelValues(spec.Name, loaded.Result).Inc()
		s.opts.Log.Info("module yields to the module of its name another owner serves; it serves once that one goes", "module", spec.Name, "source", spec.Source.String(), "digest", f.digest)
		return loaded, nil
	} else if err != nil {
		return discard(err)
	}
	s.opts.Metrics.Reloads.WithLabelValues(spec.Name, loaded.Result).Inc()
	s.opts.Log.Info("module applied", "module", spec.Name, "source", spec.Source.String(), "digest", f.digest, "result", loaded.Result,
		"compile", loaded.Compile.String(), "paused", spec.Paused)
	return loaded, nil
}

// errYielded is install's answer to a yielding spec while a module of
// another owner serves: kept in Supervisor.yielded.
var errYielded = errors.New("supervisor: yielded")

// resultYielded is Loaded.Result of a spec kept, not served (Spec.Yields).
const resultYielded = "yielded"

// failed counts a failed Apply of module label.
func (s *Supervisor) failed(label string, err error) (Loaded, error) {
	s.opts.Metrics.Reloads.WithLabelValues(label, "failed").Inc()
	return Loaded{}, err
}

// install makes version serve spec under the lock: it refuses a name
// another owner declared and a kind another module reconciles, serves the
// version (serve; loaded.Result says how), ends a promoted candidate's
// shadow, keeps the version for reuse and, for an interpreted one,
// compiles it in the background.
func (s *Supervisor) install(spec Spec, f fetched, version *versionslot.Version, reused, interpreted bool, loaded *Loaded) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("supervisor: closed")
	}
	r := s.modules[spec.Name] // it may have changed while loading
	if r != nil && r.spec.Owner != spec.Owner {
		switch {
		case spec.Yields && !r.spec.Yields:
			s.yielded[spec.Name] = spec // serves once r goes
			return errYielded
		case r.spec.Yields && !spec.Yields:
			s.opts.Log.Info("module taken over: it serves from another owner until that one goes", "module", spec.Name, "from", r.spec.Owner, "to", spec.Owner)
			s.yielded[spec.Name] = r.spec
		default:
			return &NameConflictError{Module: spec.Name, Source: spec.Source.String(), Owner: r.spec.Owner}
		}
	} else if spec.Yields {
		// A spec that yielded earlier may still be recorded when the module
		// it yielded to went through Remove (which, unlike RemoveOwned,
		// does not apply it again): it serves now, so the record is stale,
		// and RemoveOwned would otherwise take it for a yielded spec.
		delete(s.yielded, spec.Name)
	}
	g := version.Module.Manifest().For
	for name, other := range s.modules {
		if cur := other.slot.Current(); name != spec.Name && cur != nil &&
			cur.Module.Manifest().For.Group == g.Group && cur.Module.Manifest().For.Kind == g.Kind {
			return &KindConflictError{Module: spec.Name, Kind: g.Kind, Group: g.Group, Other: name, Owner: other.spec.Owner}
		}
	}
	result, err := s.serve(r, spec, version, reused)
	if err != nil {
		return err
	}
	loaded.Result = result
	r = s.modules[spec.Name]
	r.loaded = *loaded
	if c := r.candidate; c != nil && c.version == version {
		s.rollout.end(r, promoted, version) // it serves now, and no longer shadows
	}
	if !interpreted {
		s.remember(r, f.key, version)
		return nil
	}
	s.remember(r, f.key+"#interpreter", version)
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		s.upgrade(spec, f.wasm, f.limits, f.key, version)
	}()
	return nil
}
