package supervisor

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// failing is a source that cannot be read.
type failing struct{}

func (failing) Fetch(context.Context) ([]byte, error) { return nil, errors.New("connection refused") }
func (failing) String() string                        { return "url https://example.invalid/m.wasm" }

// TestLoaderFetchVerifies: the loader refuses a source it cannot read, an
// empty one, and bytes that are not the pinned ones, each with its typed
// error naming the module; the right pin (in any case, with or without
// its prefix) passes, and the key tells limits apart.
func TestLoaderFetchVerifies(t *testing.T) {
	l := &loader{limits: engine.Limits{Fuel: 1000}}
	ctx := context.Background()
	var fe *FetchError
	if _, err := l.fetch(ctx, Spec{Source: failing{}}); !errors.As(err, &fe) || fe.Module != "m.wasm" || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("unreadable source: %v", err)
	}
	if _, err := l.fetch(ctx, Spec{Name: "m", Source: source.Bytes("empty", nil)}); !errors.As(err, &fe) || !strings.Contains(err.Error(), "no bytes") {
		t.Errorf("empty source: %v", err)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	var dm *DigestMismatchError
	if _, err := l.fetch(ctx, Spec{Name: "m", Source: source.Bytes("b", b), SHA256: strings.Repeat("0", 64)}); !errors.As(err, &dm) || dm.Got != Digest(b) {
		t.Errorf("wrong pin: %v", err)
	}
	for _, pin := range []string{Digest(b), strings.ToUpper(strings.TrimPrefix(Digest(b), "sha256:"))} {
		f, err := l.fetch(ctx, Spec{Name: "m", Source: source.Bytes("b", b), SHA256: pin})
		if err != nil || f.digest != Digest(b) || string(f.wasm) != string(b) {
			t.Errorf("pin %s: %+v %v", pin, f, err)
		}
	}
	a, _ := l.fetch(ctx, Spec{Name: "m", Source: source.Bytes("b", b)})
	c, _ := l.fetch(ctx, Spec{Name: "m", Source: source.Bytes("b", b), Policy: policy.Policy{Limits: engine.Limits{Fuel: 2000}}})
	if a.key == c.key || a.limits.Fuel != 1000 || c.limits.Fuel != 2000 {
		t.Errorf("limits: the spec's must override the supervisor's and change the key: %+v / %+v", a, c)
	}
}

// TestLoaderCompileAndCheck: a module compiles into a version whose
// manifest names it; a spec that names it otherwise, or whose Check
// refuses it, is refused by check, and a spec with no name takes the
// manifest's.
func TestLoaderCompileAndCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a guest")
	}
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{CompilationCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer e.Close(ctx)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l := &loader{engine: e, metrics: m, log: logr.Discard()}
	wasm := testwasm.Build(t, "./widget")
	spec := Spec{Source: source.Bytes("widget.wasm", wasm)}
	f, err := l.fetch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	v, _, interpreted, err := l.compile(ctx, spec, f)
	if err != nil || interpreted {
		t.Fatalf("compile: %v (interpreted %v)", err, interpreted)
	}
	defer v.Module.Close(ctx)
	if err := check(&spec, v.Module, protocol.Builtin); err != nil || spec.Name != "widget" {
		t.Errorf("check of an unnamed spec: %v, name %q", err, spec.Name)
	}
	var nm *NameMismatchError
	if err := check(&Spec{Name: "other", Source: spec.Source}, v.Module, protocol.Builtin); !errors.As(err, &nm) || nm.Manifest != "widget" {
		t.Errorf("a spec naming another module: %v", err)
	}
	refused := errors.New("not on this cluster")
	if err := check(&Spec{Name: "widget", Check: func(*engine.Module) error { return refused }}, v.Module, protocol.Builtin); !errors.Is(err, refused) {
		t.Errorf("spec.Check: %v", err)
	}
	if _, _, _, err := l.compile(ctx, Spec{Name: "bad", Source: spec.Source}, fetched{label: "bad", wasm: []byte("not wasm")}); err == nil || !strings.Contains(err.Error(), "module[bad]") {
		t.Errorf("bad bytes: %v", err)
	}
}

// TestPinned: a pin matches its digest in either case, with or without
// the "sha256:" prefix; no pin matches anything; another digest does not.
func TestPinned(t *testing.T) {
	digest := Digest([]byte("\x00asm\x01\x00\x00\x00"))
	hex := strings.TrimPrefix(digest, "sha256:")
	for _, pin := range []string{"", hex, strings.ToUpper(hex), digest, "SHA256:" + strings.ToUpper(hex)} {
		if want, ok := pinned(digest, pin); !ok {
			t.Errorf("pin %q does not match %s (want %q)", pin, digest, want)
		}
	}
	other := Digest([]byte("other"))
	if want, ok := pinned(digest, other); ok || want != other {
		t.Errorf("pin %s matched %s (want %q)", other, digest, want)
	}
}
