package repocheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

const module = "github.com/wasmreconcile/wasmreconcile/"

// libraryPackages are the public packages an embedder or a CI job uses
// without running the operator: the ABI and protocol, the engine, policy,
// sources, informers, schema checks and the offline test runner. They sit
// below the runtime.
var libraryPackages = []string{"host/abi", "host/protocol", "host/policy", "host/engine", "host/source",
	"host/informer", "host/schemacheck", "host/offline", "host/modtest"}

// runtimePackages are the operator's runtime: what runs modules against a
// cluster. Only host/operator, cmd/ and the runtime itself may use them.
var runtimePackages = []string{"host/internal/reconciler", "host/internal/supervisor", "host/internal/modulecontroller",
	"host/internal/shadow", "host/internal/flightrecorder", "host/internal/versionslot", "host/internal/authz"}

// moduleDeps maps each package of this module (its path relative to the
// module) to the packages of this module it imports, directly or not
// (tests excluded).
func moduleDeps(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue
		}
		out[pkg] = nil
		for _, d := range fields[1:] {
			if rel, ok := strings.CutPrefix(d, module); ok {
				out[pkg] = append(out[pkg], rel)
			}
		}
	}
	return out
}

// TestLayers checks the layering the README describes: the library
// packages import nothing of the runtime and nothing above them, and no
// package but cmd/, hack/ and the operator's own tests imports
// host/operator, the top. A library package that pulled in the runtime
// would make every embedder of the offline runner build (and trust) the
// controller code; an internal package importing host/operator would tie
// the runtime to its public wiring.
func TestLayers(t *testing.T) {
	deps := moduleDeps(t, testwasm.RepoRoot())
	forbidden := map[string]bool{"host/operator": true}
	for _, p := range runtimePackages {
		forbidden[p] = true
	}
	for _, lib := range libraryPackages {
		if _, ok := deps[lib]; !ok {
			t.Errorf("library package %s does not exist: update libraryPackages", lib)
		}
		for _, d := range deps[lib] {
			if forbidden[d] {
				t.Errorf("%s imports %s (directly or not): the library packages must not depend on the runtime or the operator", lib, d)
			}
		}
	}
	for pkg, ds := range deps {
		if strings.HasPrefix(pkg, "cmd/") || strings.HasPrefix(pkg, "hack/") || strings.HasPrefix(pkg, "host/operator") {
			continue
		}
		for _, d := range ds {
			if d == "host/operator" {
				t.Errorf("%s imports host/operator: only the binary, hack/ and the operator's own packages may", pkg)
			}
		}
	}
	for _, p := range runtimePackages {
		if _, ok := deps[p]; !ok {
			t.Errorf("runtime package %s does not exist: update runtimePackages", p)
		}
	}
}
