package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
)

// Compiling is the one step of a load whose cost does not follow the size
// of the bytes: wazero's optimizing compiler tracks every local of a
// function across every block, so a valid 48 KB module of one function
// with 4,000 locals and 4,000 ifs takes it 20 s of CPU and 900 MB
// (docs/metering.md, "Compile bombs"). A load bounds it twice: bytes whose
// shape predicts such a compile are refused before compiling
// (CompileOptions.MaxFunctionComplexity, MaxModuleComplexity), and the
// compile itself can run in a separate process under memory, CPU and
// wall-clock limits (CompileOptions.Worker) that writes the machine code
// into the compilation cache, from which the host then loads it: a compile
// that goes over a limit kills the worker, never the host.

// CompileOptions bound the cost of compiling modules. The zero value refuses
// pathological shapes and compiles in this process.
type CompileOptions struct {
	// MaxFunctionComplexity refuses, before compiling, a module with a
	// function whose (locals+1)*(blocks+1) is over it, where locals counts
	// parameters and blocks counts blocks, loops and ifs: the compiler's
	// time and memory grow with that product. The widget module's most
	// complex function is 10,444; a function of 1,000,000 takes wazero's
	// compiler about 1 s and 140 MB on this project's machine.
	// Defaults to DefaultMaxFunctionComplexity; negative values are not
	// possible, and math.MaxUint64 turns the check off.
	MaxFunctionComplexity uint64
	// MaxModuleComplexity refuses a module whose functions' complexities
	// add up to more: many functions just under MaxFunctionComplexity add
	// their compile times up. The widget's total is 493,613.
	// Defaults to DefaultMaxModuleComplexity.
	MaxModuleComplexity uint64
	// Worker, when set, compiles each module's bytes in a separate process
	// under its limits (see CompileWorker), and the host loads the result
	// from the compilation cache. Engines that interpret
	// (Options.Interpreter) compile in this process: the interpreter's
	// compile is linear in the bytes.
	// Defaults to nil: the compile runs in this process, bounded only by
	// the complexity limits above.
	Worker *CompileWorker
}

// Defaults of CompileOptions.
const (
	DefaultMaxFunctionComplexity = 1_000_000
	DefaultMaxModuleComplexity   = 20_000_000
)

// CompileWorker runs compiles in processes of their own. A worker is a
// program that calls MaybeRunCompileWorker first in main; SelfCompileWorker
// starts this executable again as one.
//
// Each compile starts a worker, writes it the instrumented bytes, and waits:
// the worker compiles them with the host's exact configuration into the
// compilation cache (Options.CompilationCacheDir) and exits. The host then
// compiles the same bytes, which the cache answers without compiling. A
// worker over MaxMemory, MaxCPU or MaxCodeBytes is killed by the kernel,
// one over Timeout by the host, and the load fails with an
// *InvalidModuleError naming the limit. On Linux the worker also runs at a
// lower scheduling priority (nice 10), with GOMAXPROCS=1, and dies with the
// host. Elsewhere only Timeout applies.
type CompileWorker struct {
	// Command returns the command that starts a worker. Required. The host
	// sets its standard streams; its environment, when nil, is the host's.
	Command func(ctx context.Context) *exec.Cmd
	// MaxMemory caps the worker's data (RLIMIT_DATA), in bytes. The widget
	// module (3.3 MB) needs between 160 and 192 MiB; a Go process needs
	// more than 128 MiB to start its heap at all.
	// Defaults to DefaultCompileMaxMemory (384 MiB).
	MaxMemory int64
	// MaxCPU caps the worker's CPU time (RLIMIT_CPU), rounded up to whole
	// seconds. The widget compiles in about 1.5 s of CPU.
	// Defaults to DefaultCompileMaxCPU (30 s).
	MaxCPU time.Duration
	// Timeout caps the worker's wall-clock time, the wait for a free
	// worker (MaxConcurrent) excluded.
	// Defaults to DefaultCompileTimeout (2 minutes).
	Timeout time.Duration
	// MaxCodeBytes caps the machine code one compile may write
	// (RLIMIT_FSIZE): the widget's is 14.6 MiB.
	// Defaults to DefaultCompileMaxCodeBytes (256 MiB).
	MaxCodeBytes int64
	// MaxConcurrent is how many workers run at once; more compiles wait for
	// one to end. Defaults to 2, so that one module's compile never holds
	// up every other's.
	MaxConcurrent int
}

// Defaults of CompileWorker.
const (
	DefaultCompileMaxMemory    = 384 << 20
	DefaultCompileMaxCPU       = 30 * time.Second
	DefaultCompileTimeout      = 2 * time.Minute
	DefaultCompileMaxCodeBytes = 256 << 20
	DefaultCompileConcurrency  = 2
)

func (w CompileWorker) withDefaults() (CompileWorker, error) {
	if w.Command == nil {
		return w, errors.New("CompileWorker.Command is required")
	}
	if w.MaxMemory < 0 || w.MaxCPU < 0 || w.Timeout < 0 || w.MaxCodeBytes < 0 || w.MaxConcurrent < 0 {
		return w, fmt.Errorf("compile worker limits must not be negative: %+v", w)
	}
	if w.MaxMemory == 0 {
		w.MaxMemory = DefaultCompileMaxMemory
	}
	if w.MaxCPU == 0 {
		w.MaxCPU = DefaultCompileMaxCPU
	}
	if w.Timeout == 0 {
		w.Timeout = DefaultCompileTimeout
	}
	if w.MaxCodeBytes == 0 {
		w.MaxCodeBytes = DefaultCompileMaxCodeBytes
	}
	if w.MaxConcurrent == 0 {
		w.MaxConcurrent = DefaultCompileConcurrency
	}
	return w, nil
}

func (c CompileOptions) withDefaults() (CompileOptions, error) {
	if c.MaxFunctionComplexity == 0 {
		c.MaxFunctionComplexity = DefaultMaxFunctionComplexity
	}
	if c.MaxModuleComplexity == 0 {
		c.MaxModuleComplexity = DefaultMaxModuleComplexity
	}
	if c.Worker != nil {
		w, err := c.Worker.withDefaults()
		if err != nil {
			return c, err
		}
		c.Worker = &w
	}
	return c, nil
}

// CompileWorkerEnv is the environment variable that makes a process started
// by SelfCompileWorker a compile worker (MaybeRunCompileWorker).
const CompileWorkerEnv = "WASMRECONCILE_COMPILE_WORKER"

// CompileWorkerPathEnv, when set, names the executable SelfCompileWorker
// starts instead of this one: a build of the same module's code that
// calls MaybeRunCompileWorker (the tests set it, since a -race binary
// cannot run under a worker's data limit).
const CompileWorkerPathEnv = "WASMRECONCILE_COMPILE_WORKER_PATH"

// SelfCompileWorker returns a CompileWorker with the default limits that
// starts this executable again (or the one CompileWorkerPathEnv names),
// with CompileWorkerEnv set and no arguments. The executable must call
// MaybeRunCompileWorker first in main, or the copy would run as itself.
func SelfCompileWorker() (*CompileWorker, error) {
	exe := os.Getenv(CompileWorkerPathEnv)
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("compile worker: finding this executable: %w", err)
		}
	}
	return &CompileWorker{Command: func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), CompileWorkerEnv+"=1")
		return cmd
	}}, nil
}

// MaybeRunCompileWorker runs this process as a compile worker, then exits,
// when CompileWorkerEnv is set (SelfCompileWorker sets it); otherwise it
// returns at once. A worker reads one compile request on standard input,
// answers on standard output and exits 0, or 1 with an error on standard
// error.
func MaybeRunCompileWorker() {
	if os.Getenv(CompileWorkerEnv) != "1" {
		return
	}
	if err := ServeCompileWorker(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compile worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// workerRequest heads a compile request; the bytes to compile follow it.
type workerRequest struct {
	// Wazero is the host's wazero version: the worker must compile with the
	// same, or the cache would not answer the host.
	Wazero string `json:"wazero"`
	// CacheDir is the compilation cache to write into.
	CacheDir string `json:"cacheDir"`
	// Size is how many bytes of the module to compile follow.
	Size int `json:"size"`
	// Validate, when not zero, is how many bytes of an input follow the
	// module: wazero validates them first (as the host's engine would, with
	// the interpreter) and an invalid input is answered as Invalid.
	Validate int `json:"validate,omitempty"`
}

// workerAnswer is a worker's answer.
type workerAnswer struct {
	Error string `json:"error,omitempty"`
	// Invalid: the input to validate is not a module wazero accepts; Error
	// says why.
	Invalid bool `json:"invalid,omitempty"`
}

// ServeCompileWorker reads one compile request from r, compiles the module
// it carries into the request's compilation cache with the engine's
// compiler configuration, and writes the outcome to w. A module the
// compiler refuses is an answer, not an error; the error is for a request
// it cannot serve.
func ServeCompileWorker(r io.Reader, w io.Writer) error {
	br := bufio.NewReader(r)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	var req workerRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return fmt.Errorf("decoding the request: %w", err)
	}
	v, err := wazeroVersionIn(req.CacheDir)
	if err != nil {
		return fmt.Errorf("finding wazero's version: %w", err)
	}
	if req.Wazero != v {
		return fmt.Errorf("this worker runs wazero %s but the host %s: the worker must be the host's own executable", v, req.Wazero)
	}
	if req.Size < 0 || req.Size > 1<<30 || req.Validate < 0 || req.Validate > 1<<30 {
		return fmt.Errorf("request of %d and %d bytes", req.Size, req.Validate)
	}
	wasm := make([]byte, req.Size)
	if _, err := io.ReadFull(br, wasm); err != nil {
		return fmt.Errorf("reading the module: %w", err)
	}
	ctx := context.Background()
	if req.Validate > 0 {
		input := make([]byte, req.Validate)
		if _, err := io.ReadFull(br, input); err != nil {
			return fmt.Errorf("reading the input to validate: %w", err)
		}
		if err := validate(ctx, input); err != nil {
			return json.NewEncoder(w).Encode(workerAnswer{Error: err.Error(), Invalid: true})
		}
	}
	cache, err := wazero.NewCompilationCacheWithDir(req.CacheDir)
	if err != nil {
		return fmt.Errorf("compilation cache %q: %w", req.CacheDir, err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, compilerConfig(false).WithCompilationCache(cache))
	var answer workerAnswer
	if c, err := rt.CompileModule(ctx, wasm); err != nil {
		answer.Error = err.Error()
	} else {
		_ = c.Close(ctx)
	}
	_ = rt.Close(ctx)
	_ = cache.Close(ctx)
	return json.NewEncoder(w).Encode(answer)
}

// compilerConfig is the runtime configuration modules compile with, in the
// host and in a compile worker alike: the compiled code, and the key the
// compilation cache files it under, depend on it.
func compilerConfig(interpreter bool) wazero.RuntimeConfig {
	cfg := wazero.NewRuntimeConfig()
	if interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	return cfg.WithCoreFeatures(coreFeatures)
}

// WazeroVersion is the version of wazero as this executable's compilation
// cache files its code under: the module version it was built with, "dev"
// for a build without module information (a test binary), or what its
// build set with -ldflags. It is read from wazero itself, from the
// directory a compilation cache makes under os.TempDir. A compile worker
// must report the same, or the host's cache would not find the worker's
// code.
func WazeroVersion() string {
	v, err := wazeroVersionIn(os.TempDir())
	if err != nil {
		return "unknown"
	}
	return v
}

var (
	versionMu    sync.Mutex
	versionKnown string
)

// wazeroVersionIn is WazeroVersion, found with a compilation cache made in
// a directory of its own under dir (which must be writable: a compile
// worker's cache directory). It is found once per process.
func wazeroVersionIn(dir string) (string, error) {
	versionMu.Lock()
	defer versionMu.Unlock()
	if versionKnown != "" {
		return versionKnown, nil
	}
	tmp, err := os.MkdirTemp(dir, ".wazero-version-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	c, err := wazero.NewCompilationCacheWithDir(tmp)
	if err != nil {
		return "", err
	}
	_ = c.Close(context.Background())
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("a compilation cache made %d directories, want 1", len(entries))
	}
	v := strings.TrimPrefix(entries[0].Name(), "wazero-")
	versionKnown = strings.TrimSuffix(v, "-"+runtime.GOARCH+"-"+runtime.GOOS)
	return versionKnown, nil
}

// CompileLimitError is the cause (InvalidModuleError.Err) of a load whose
// compile went over one of CompileWorker's limits.
type CompileLimitError struct {
	// Limit is "memory", "cpu", "time" or "code".
	Limit string
	// Value is the limit: bytes for memory and code, a duration for cpu
	// and time.
	Value string
	// Flag is the operator flag that sets it.
	Flag string
	// Detail is what the worker said last, if anything.
	Detail string
}

func (e *CompileLimitError) Error() string {
	what := map[string]string{
		"memory": "the compiler needed more than %s of memory",
		"cpu":    "the compiler used more than %s of CPU",
		"time":   "the compile took longer than %s",
		"code":   "the compiled code is larger than %s",
	}[e.Limit]
	if what == "" {
		what = "the compile went over %s"
	}
	msg := fmt.Sprintf(what, e.Value) + " (" + e.Flag + ")"
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// workerFailedError reports a worker that failed for another reason than a
// limit: it could not start, or broke the protocol.
type workerFailedError struct{ err error }

func (e *workerFailedError) Error() string { return "compile worker failed: " + e.err.Error() }
func (e *workerFailedError) Unwrap() error { return e.err }

// forgetWorkerCompiled forgets that a worker compiled metered: its code
// is not in the cache after all (removed from the directory), and the next
// compileInWorker runs a worker again.
func (e *Engine) forgetWorkerCompiled(metered []byte) {
	sum := sha256.Sum256(metered)
	e.mu.Lock()
	delete(e.workerCompiled, hex.EncodeToString(sum[:]))
	e.mu.Unlock()
}

// compileInWorker has a worker compile metered into the engine's
// compilation cache. It returns nil once the cache holds the code, a
// *CompileLimitError for a compile over a limit, a compile error of
// wazero's (the bytes do not compile), or a *workerFailedError.
func (e *Engine) compileInWorker(ctx context.Context, metered, unvalidated []byte) error {
	w := e.compile.Worker
	sum := sha256.Sum256(metered)
	key := hex.EncodeToString(sum[:])
	e.mu.Lock()
	done := e.workerCompiled[key]
	e.mu.Unlock()
	if done && unvalidated == nil {
		return nil // compiled by a worker before: the cache holds it
	}
	select {
	case e.workers <- struct{}{}:
		defer func() { <-e.workers }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.budget != nil {
		res, _, err := e.budget.acquire(ctx, w.MaxMemory, "compile")
		if err != nil {
			return err
		}
		defer res.Release()
	}
	version, err := wazeroVersionIn(e.cacheDir)
	if err != nil {
		return &workerFailedError{err: fmt.Errorf("finding wazero's version in %s: %w", e.cacheDir, err)}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	cmd := w.Command(ctx)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &stdout, n: 64 << 10}, stderr
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// The Go runtime of the worker collects garbage before it reaches the
	// kernel's limit, and compiles on one thread (wazero compiles one
	// function at a time anyway), leaving the other CPUs to the host.
	cmd.Env = append(cmd.Env, "GOMEMLIMIT="+strconv.FormatInt(w.MaxMemory/10*8, 10), "GOMAXPROCS=1")
	configureWorker(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return &workerFailedError{err: err}
	}
	if err := cmd.Start(); err != nil {
		return &workerFailedError{err: fmt.Errorf("starting %s: %w", cmd.Path, err)}
	}
	// The limits are set before the worker reads its request: until then
	// it has done nothing but start its runtime.
	if err := limitWorker(cmd.Process.Pid, w); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return &workerFailedError{err: fmt.Errorf("limiting the worker: %w", err)}
	}
	header, _ := json.Marshal(workerRequest{Wazero: version, CacheDir: e.cacheDir, Size: len(metered), Validate: len(unvalidated)})
	go func() {
		// A worker that dies early closes the pipe: the write fails, and
		// Wait says why.
		_, _ = stdin.Write(append(header, '\n'))
		_, _ = stdin.Write(metered)
		_, _ = stdin.Write(unvalidated)
		_ = stdin.Close()
	}()
	waitErr := cmd.Wait()
	if waitErr != nil {
		if ctx.Err() != nil {
			// The worker's own deadline, not the caller's. (Timing it
			// from the worker's start instead misread a deadline that
			// fired while a loaded machine was still starting the worker
			// as an invalid module.)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
				return &CompileLimitError{Limit: "time", Value: w.Timeout.String(), Flag: "--compile-timeout"}
			}
			return ctx.Err()
		}
		return classifyWorkerExit(cmd.ProcessState, stderr.String(), w)
	}
	var answer workerAnswer
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &answer); err != nil {
		return &workerFailedError{err: fmt.Errorf("unreadable answer %q: %w", truncateString(stdout.String(), 200), err)}
	}
	if answer.Invalid {
		return &validationError{err: errors.New(answer.Error)}
	}
	if answer.Error != "" {
		if strings.Contains(answer.Error, "file too large") {
			return &CompileLimitError{Limit: "code", Value: quantity(w.MaxCodeBytes), Flag: "--compile-max-code-bytes"}
		}
		return errors.New(answer.Error)
	}
	e.mu.Lock()
	if len(e.workerCompiled) >= maxValidated {
		clear(e.workerCompiled)
	}
	e.workerCompiled[key] = true
	e.mu.Unlock()
	return nil
}

// classifyWorkerExit says why a worker exited with an error: a limit the
// kernel enforced, or something else.
func classifyWorkerExit(st *os.ProcessState, stderr string, w *CompileWorker) error {
	last := lastLine(stderr)
	switch {
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory"):
		return &CompileLimitError{Limit: "memory", Value: quantity(w.MaxMemory), Flag: "--compile-max-memory"}
	case strings.Contains(stderr, "file too large") || workerSignal(st) == "SIGXFSZ":
		return &CompileLimitError{Limit: "code", Value: quantity(w.MaxCodeBytes), Flag: "--compile-max-code-bytes"}
	case workerCPUExceeded(st, w.MaxCPU):
		return &CompileLimitError{Limit: "cpu", Value: w.MaxCPU.String(), Flag: "--compile-max-cpu"}
	}
	if sig := workerSignal(st); sig != "" {
		return &workerFailedError{err: fmt.Errorf("killed by %s: %s", sig, last)}
	}
	return &workerFailedError{err: fmt.Errorf("exit code %d: %s", st.ExitCode(), last)}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// quantity renders bytes as a Kubernetes quantity when it is a whole
// number of MiB or GiB.
func quantity(b int64) string {
	switch {
	case b%gib == 0:
		return fmt.Sprintf("%dGi", b/gib)
	case b%mib == 0:
		return fmt.Sprintf("%dMi", b/mib)
	}
	return fmt.Sprintf("%d bytes", b)
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	k := len(p)
	if len(p) > l.n {
		p = p[:l.n]
	}
	l.n -= len(p)
	if len(p) > 0 {
		if _, err := l.w.Write(p); err != nil {
			return 0, err
		}
	}
	return k, nil
}
