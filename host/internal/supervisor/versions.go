package supervisor

import (
	"context"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
)

// upgrade compiles the bytes and, if the interpreted version still serves,
// swaps the compiled one in and retires the interpreted one.
func (s *Supervisor) upgrade(spec Spec, wasm []byte, limits engine.Limits, key string, interpreted *versionslot.Version) {
	ctx := s.closing
	start := time.Now()
	m, err := s.opts.Engine.Load(ctx, spec.Source.String(), wasm, limits)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Log.Info("compiling after serving from the interpreter failed; the interpreter keeps serving", "module", spec.Name, "error", err.Error())
		}
		return
	}
	s.opts.Metrics.CompileSeconds.WithLabelValues(spec.Name).Observe(time.Since(start).Seconds())
	compiled := versionslot.New(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[spec.Name]
	if s.closed || r == nil || r.slot.Current() != interpreted {
		_ = m.Close(ctx) // superseded or removed meanwhile
		return
	}
	if _, err := r.slot.Swap(compiled); err != nil {
		_ = m.Close(ctx)
		return
	}
	kept := []*cached{{key: key, version: compiled}}
	for _, c := range r.versions {
		if c.version != interpreted {
			kept = append(kept, c)
		}
	}
	r.versions = kept
	s.retire(interpreted)
	s.opts.Metrics.Reloads.WithLabelValues(spec.Name, "upgraded").Inc()
	s.opts.Log.Info("compiled version replaced the interpreted one", "module", spec.Name, "compile", time.Since(start).String())
}

// remember puts version first in r's versions and retires the ones beyond
// KeepVersions once their running calls finish. s.mu is held.
func (s *Supervisor) remember(r *running, key string, v *versionslot.Version) {
	kept := []*cached{{key: key, version: v}}
	for _, c := range r.versions {
		if c.version == v {
			continue
		}
		if len(kept) < s.opts.KeepVersions {
			kept = append(kept, c)
			continue
		}
		s.retire(c.version)
	}
	r.versions = kept
}

// retire closes v once its running calls finish, in the background.
// s.mu is held.
func (s *Supervisor) retire(v *versionslot.Version) {
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		_ = v.Retire(context.Background())
	}()
}

// keptVersion finds a version of module name (of any module when name is
// empty) compiled from the same bytes and limits (key): one serving or
// kept, or the candidate's (a promotion: its compiled code serves at
// once). It returns the version and its module's name, or nil.
func (s *Supervisor) keptVersion(name, key string) (*versionslot.Version, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var version *versionslot.Version
	found := ""
	for n, r := range s.modules {
		if name != "" && n != name {
			continue
		}
		for _, c := range r.versions {
			if c.key == key {
				version, found = c.version, n
			}
		}
		if c := r.candidate; version == nil && c != nil && c.key == key {
			version, found = c.version, n
		}
	}
	return version, found
}
