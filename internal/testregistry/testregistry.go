// Package testregistry runs a real OCI registry, the CNCF distribution
// registry (github.com/distribution/distribution/v3), on loopback for
// tests. hack/registry.sh builds the binary once into a cache outside the
// clone; $WASMRECONCILE_REGISTRY names another binary.
//
// A registry's storage is a temporary directory, it listens on a free
// loopback port, and it dies with the test process (a parent-death signal
// on Linux) as well as on Close.
package testregistry

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// Options configure Start. The zero value is an anonymous registry.
type Options struct {
	// Username and Password, when Username is not "", make the registry
	// require them (htpasswd basic auth). Default: anonymous access.
	Username, Password string
}

// Registry is a running registry.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of a reference.
	Host string

	cmd  *exec.Cmd
	dir  string
	logs *lockedWriter
	done chan struct{}
	once sync.Once
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the registry binary: $WASMRECONCILE_REGISTRY, else the
// one hack/registry.sh builds (once per process).
func Binary() (string, error) {
	if p := os.Getenv("WASMRECONCILE_REGISTRY"); p != "" {
		return p, nil
	}
	binOnce.Do(func() {
		script := filepath.Join(testwasm.RepoRoot(), "hack", "registry.sh")
		var stdout bytes.Buffer
		cmd := exec.Command("bash", script)
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			binErr = fmt.Errorf("%s failed: %w", script, err)
			return
		}
		binPath = filepath.Join(strings.TrimSpace(stdout.String()), "registry")
	})
	return binPath, binErr
}

// Start runs a registry and returns once it answers /v2/.
func Start(opts Options) (*Registry, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		r, err := start(bin, opts)
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(bin string, opts Options) (*Registry, error) {
	dir, err := os.MkdirTemp("", "testregistry-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "data"), host)
	if opts.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(opts.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: wasmreconcile-test\n    path: %s\n", pw)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &Registry{Host: host, dir: dir, logs: &lockedWriter{w: &bytes.Buffer{}}, done: make(chan struct{})}
	r.cmd = exec.Command(bin, "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	r.cmd.SysProcAttr = sysProcAttr()
	if err := r.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-r.done:
			r.Close()
			return nil, fmt.Errorf("registry exited at start: %s", r.Logs())
		default:
		}
		resp, err := http.Get("http://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			r.Close()
			return nil, fmt.Errorf("registry did not answer on %s within 60s: %s", host, r.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logs returns what the registry wrote.
func (r *Registry) Logs() string {
	r.logs.mu.Lock()
	defer r.logs.mu.Unlock()
	return r.logs.w.String()
}

// Close stops the registry and removes its storage.
func (r *Registry) Close() {
	r.once.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		os.RemoveAll(r.dir)
	})
}

// DockerConfigJSON returns a Docker config ({"auths": …}) holding user and
// password for this registry, as `kubectl create secret docker-registry`
// writes it.
func (r *Registry) DockerConfigJSON(user, password string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{
		r.Host: map[string]string{
			"username": user,
			"password": password,
			"auth":     base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
		},
	}})
	return b
}

// Wait blocks until ctx ends or the registry exits; for tests of what
// happens when it is gone.
func (r *Registry) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("no TCP address")
	}
	return addr.Port, nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
