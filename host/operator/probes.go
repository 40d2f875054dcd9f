package operator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ModulesPath, served beside /readyz, lists each module with whether its
// code is loaded or unloaded for idleness (--idle-module-timeout), its
// instances and its lifecycle states. It always answers 200: an unloaded
// module is ready, and the next event loads it back.
const ModulesPath = "/readyz/modules"

// probeServer serves /healthz (ping), /readyz (the host's readiness) and
// ModulesPath on addr. The operator serves them itself instead of through
// the manager's probe server, whose handlers are fixed, so that /readyz can
// say which modules are loaded.
func probeServer(addr string, h *Host) (*manager.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for the health probes on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	handle := func(path string, checks map[string]healthz.Checker) {
		hh := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, hh)
		mux.Handle(path+"/", hh)
	}
	handle("/healthz", map[string]healthz.Checker{"ping": healthz.Ping})
	handle("/readyz", map[string]healthz.Checker{"wasmreconcile": func(*http.Request) error { return h.Ready() }})
	mux.HandleFunc(ModulesPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprint(w, h.modulesReport(r.Context()))
	})
	return &manager.Server{Name: "health probe", Listener: ln,
		Server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// modulesReport is ModulesPath's text: a line per module, sorted, then a
// count of the loaded and unloaded ones.
func (h *Host) modulesReport(ctx context.Context) string {
	mods := h.supervisor.Metrics(ctx)
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	var b strings.Builder
	loaded := 0
	for _, m := range mods {
		code := "unloaded (no call for its idle module timeout; the next event loads it back)"
		if m.Loaded {
			code = "loaded"
			loaded++
		}
		var states []string
		for _, s := range []struct {
			on   bool
			name string
		}{{m.Initialized, "initialized"}, {m.Converged, "converged"}, {m.Quiescent, "quiescent"}, {m.SyncFailed, "SyncFailed"}, {m.CacheStale, "CacheStale"}} {
			if s.on {
				states = append(states, s.name)
			}
		}
		fmt.Fprintf(&b, "%s %s: %s, %d instances (%d idle)", m.Name, m.Digest, code, m.Pool.Live, m.Pool.Idle)
		if len(states) > 0 {
			fmt.Fprintf(&b, ", %s", strings.Join(states, ", "))
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d modules: %d loaded, %d unloaded\n", len(mods), loaded, len(mods)-loaded)
	if h.shards != nil {
		b.WriteString(h.shards.report())
	}
	return b.String()
}
