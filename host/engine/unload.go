package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
)

// A module that serves no call for Limits.IdleModuleTimeout is unloaded: its
// instances are closed and its code (the wazero runtime and compiled
// module, with the machine code and the decoded module they hold) is
// dropped. What it needs to come back stays: in memory its name, digest,
// manifest and limits; on disk, in the compilation cache directory, its
// metered rewrite (rewriteCache), its machine code (wazero's cache) and its
// input bytes (originals). The first call after that loads the code back
// (Module.useCode), reading all three from disk: nothing is instrumented or
// compiled again unless a file went missing.
//
// Instances bracket the use of the code: each one counts in Module.users
// from before it is instantiated until it is closed, and the code is dropped
// only while users is 0, under codeMu. A call that needs an instance while
// the code is gone waits on codeMu for the load, as it would wait for a free
// instance, so calls are neither refused nor reordered.

// code is a module's compiled code: the runtime its instances run in, the
// compiled module they are instantiated from, and the compilation cache
// reference to give back.
type code struct {
	runtime  wazero.Runtime
	compiled wazero.CompiledModule
	release  func(context.Context) // gives back the compilation cache (Engine.cacheFor)
}

// close frees the code; its instances must be closed first (see
// Module.Close for the order that stops calls in flight).
func (c *code) close(ctx context.Context) {
	_ = c.runtime.Close(ctx)
	// A runtime built on a CompilationCache leaves the code it compiled in
	// the cache when it closes: each CompiledModule holds one reference to
	// it, counted by the bytes' hash, and Close gives it back (once: a
	// second would take another module's). The cache, shared with the
	// modules loaded from the same bytes, is closed with the last of them,
	// which frees the code; instances still running keep it mapped until
	// they are collected.
	_ = c.compiled.Close(ctx)
	c.release(ctx)
}

// Loaded reports whether the module's code is in memory: false while it is
// unloaded for having served no call for Limits.IdleModuleTimeout, and
// after Close.
func (m *Module) Loaded() bool {
	m.codeMu.Lock()
	defer m.codeMu.Unlock()
	return m.code != nil
}

// Unloadable reports whether the module is unloaded when idle: its
// Limits.IdleModuleTimeout is positive and its engine keeps what it needs
// to load it back on disk.
func (m *Module) Unloadable() bool { return m.reload != nil }

// ReloadError reports that an unloaded module could not be loaded back for a
// call. The call fails with it; the next call tries again.
type ReloadError struct {
	Module string
	Call   string
	Err    error
}

func (e *ReloadError) Error() string {
	return fmt.Sprintf("module[%s] %s: loading the module back after it was unloaded for idleness: %v; check the compilation cache directory, or set limits.idleModuleTimeout negative (--idle-module-timeout=-1s) to keep it loaded",
		e.Module, e.Call, e.Err)
}

func (e *ReloadError) Unwrap() error { return e.Err }

// useCode returns the module's code for one instance, loading it back if
// it was unloaded; the instance gives it back with doneWithCode when it
// closes.
func (m *Module) useCode(ctx context.Context, call string) (*code, error) {
	m.codeMu.Lock()
	defer m.codeMu.Unlock()
	if m.closed {
		return nil, &TrapError{Module: m.name, Call: call, Reason: "the module is closed"}
	}
	if m.code == nil {
		start := time.Now()
		c, err := m.reload(ctx)
		took := time.Since(start)
		if m.reloaded != nil {
			m.reloaded(m.name, took, err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, &CanceledError{Module: m.name, Call: call}
			}
			return nil, &ReloadError{Module: m.name, Call: call, Err: err}
		}
		m.code = c
		m.lastCall.Store(time.Now().UnixNano())
		m.armIdleLocked()
	}
	m.users++
	return m.code, nil
}

// doneWithCode ends an instance's use of the module's code.
func (m *Module) doneWithCode() {
	m.codeMu.Lock()
	m.users--
	m.codeMu.Unlock()
}

// armIdleLocked starts the timer that unloads the module once it has
// served no call for Limits.IdleModuleTimeout. m.codeMu is held.
func (m *Module) armIdleLocked() {
	if m.reload == nil || m.limits.IdleModuleTimeout <= 0 || m.closed || m.code == nil || m.idleTimer != nil {
		return
	}
	due := time.Unix(0, m.lastCall.Load()).Add(m.limits.IdleModuleTimeout)
	m.idleTimer = time.AfterFunc(time.Until(due), func() { m.unloadIfIdle(time.Now()) })
}

// unloadIfIdle unloads the module if it has served no call for
// Limits.IdleModuleTimeout at now, and otherwise arms the timer again. It
// reports whether it unloaded the module. The timer calls it; a test may
// call it with a time of its own.
func (m *Module) unloadIfIdle(now time.Time) bool {
	m.codeMu.Lock()
	if m.idleTimer != nil {
		m.idleTimer.Stop() // a no-op when the timer is what called
		m.idleTimer = nil
	}
	due := time.Unix(0, m.lastCall.Load()).Add(m.limits.IdleModuleTimeout)
	if m.reload == nil || m.limits.IdleModuleTimeout <= 0 || m.closed || m.code == nil || now.Before(due) {
		m.armIdleLocked()
		m.codeMu.Unlock()
		return false
	}
	m.codeMu.Unlock()
	// No call for the timeout: the instances are idle, unless one has just
	// started. Close them (without codeMu: closing one gives its code back).
	quiet := m.pool.closeIdle()
	m.codeMu.Lock()
	if !quiet || m.users > 0 || m.closed || m.code == nil {
		// A call is running or has just started: it ends with lastCall
		// moved, and the timer, armed again, finds the module busy.
		if !quiet || m.users > 0 {
			m.lastCall.Store(now.UnixNano())
		}
		m.armIdleLocked()
		m.codeMu.Unlock()
		return false
	}
	c := m.code
	m.code = nil
	m.codeMu.Unlock()
	c.close(context.Background())
	if m.unloaded != nil {
		m.unloaded(m.name)
	}
	return true
}

// originalsDir is the directory, inside the compilation cache directory,
// that keeps the input bytes of modules that may be unloaded (originals).
const originalsDir = "wasmreconcile-modules"

// originals keeps the input bytes of unloadable modules on disk, named by
// their sha256, so that a module whose metered rewrite is gone from the
// rewriteCache when it is loaded back (removed by hand, a disk error) can
// be instrumented again. A file is read back only if its content still has
// the sha256 in its name. The zero value (no directory) keeps nothing.
type originals struct {
	dir string
}

func newOriginals(cacheDir string) originals {
	if cacheDir == "" {
		return originals{}
	}
	return originals{dir: filepath.Join(cacheDir, originalsDir)}
}

func (o originals) path(digest string) string {
	return filepath.Join(o.dir, strings.TrimPrefix(digest, "sha256:")+".wasm")
}

// put keeps wasm, whose digest is given, unless a file of that digest is
// there already.
func (o originals) put(digest string, wasm []byte) error {
	if o.dir == "" {
		return fmt.Errorf("no compilation cache directory")
	}
	p := o.path(digest)
	if fi, err := os.Stat(p); err == nil && fi.Size() == int64(len(wasm)) {
		return nil
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(p, wasm)
}

// get reads back the bytes of digest.
func (o originals) get(digest string) ([]byte, error) {
	b, err := os.ReadFile(o.path(digest))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if want := strings.TrimPrefix(digest, "sha256:"); !bytes.Equal([]byte(hex.EncodeToString(sum[:])), []byte(want)) {
		return nil, fmt.Errorf("%s holds bytes of sha256:%s, not %s", o.path(digest), hex.EncodeToString(sum[:]), digest)
	}
	dirquota.Touch(o.path(digest))
	return b, nil
}

// unloadable makes m unloadable when its limits ask for it and the engine
// can load it back from disk: it keeps wasm in the originals and sets
// m.reload. It is called once m is loaded.
func (e *Engine) unloadable(m *Module, wasm []byte) {
	if m.limits.IdleModuleTimeout <= 0 || e.cacheDir == "" {
		return
	}
	if err := e.originals.put(m.digest, wasm); err != nil {
		return // best effort: the module stays loaded
	}
	digest, limits := m.digest, m.limits
	// A bounded cache directory keeps what reloadCode reads while m is open.
	m.unpin = e.pin(e.originals.path(digest), e.rewrites.path(digest, e.instrumentOptions(limits)))
	m.reload = func(ctx context.Context) (*code, error) {
		// Failed ones too, as Load: compiling again may have written.
		defer e.pruneCache()
		return e.reloadCode(ctx, m.name, digest, limits)
	}
	m.unloaded, m.reloaded = e.unloaded, e.reloaded
	m.codeMu.Lock()
	m.lastCall.Store(time.Now().UnixNano())
	m.armIdleLocked()
	m.codeMu.Unlock()
}

// reloadCode loads back the code of the module named name whose input has
// digest, under limits: its metered rewrite from the rewriteCache (or its
// input from the originals, instrumented again), compiled from the
// compilation cache.
func (e *Engine) reloadCode(ctx context.Context, name, digest string, limits Limits) (*code, error) {
	metered, ok := e.rewrites.get(e.rewrites.path(digest, e.instrumentOptions(limits)))
	var unvalidated []byte
	if !ok {
		wasm, err := e.originals.get(digest)
		if err != nil {
			return nil, fmt.Errorf("its metered rewrite and its bytes are gone: %w", err)
		}
		if metered, unvalidated, err = e.instrument(ctx, digest, wasm, limits); err != nil {
			return nil, err
		}
	}
	return e.compileCode(ctx, name, digest, metered, unvalidated, limits)
}
