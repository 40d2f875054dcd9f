//go:build !runonly

package main

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
)

// TestToolNamesAreTheToolCommands: the run build refuses exactly the
// commands the full build has, by the same names.
func TestToolNamesAreTheToolCommands(t *testing.T) {
	got := slices.Sorted(maps.Keys(toolCommands))
	want := slices.Sorted(slices.Values(toolNames))
	if !slices.Equal(got, want) {
		t.Errorf("toolCommands %q, toolNames %q", got, want)
	}
	for _, name := range toolNames {
		if !strings.Contains(usage, "operator "+name+" ") {
			t.Errorf("usage does not show operator %s", name)
		}
	}
}

// TestRunBuild builds the operator as the image ships it (-tags runonly)
// and checks that it runs, refuses the offline commands with a message that
// says where they are, and links none of their dependencies.
func TestRunBuild(t *testing.T) {
	t.Parallel()
	bin, err := testshare.GoBinary("operator-run", "./cmd/operator", "", "runonly")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "wasmreconcile operator") {
		t.Errorf("version: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "This is the run build") {
		t.Errorf("--help: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "run").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no modules: pass --module") {
		t.Errorf("run without modules: %v\n%s", err, out)
	}
	for _, name := range toolNames {
		out, err = exec.Command(bin, name, "--help").CombinedOutput()
		want := "operator " + name + ": this is the run build of the operator"
		if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "make operator") {
			t.Errorf("%s in the run build: %v\n%s", name, err, out)
		}
	}
	// What the run build must not link: the offline commands' validation
	// (CEL, OpenAPI schemas) and operator dev's control plane.
	info, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	for _, mod := range []string{"github.com/google/cel-go", "github.com/antlr4-go/antlr", "google.golang.org/grpc", "sigs.k8s.io/controller-runtime/tools/setup-envtest"} {
		if strings.Contains(string(info), "\t"+mod+"\t") {
			t.Errorf("the run build links %s", mod)
		}
	}
	sym, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	for _, pkg := range []string{"host/schemacheck", "internal/controlplane", "cmd/operator/internal/scaffold"} {
		if strings.Contains(string(sym), "wasmreconcile/wasmreconcile/"+pkg+".") {
			t.Errorf("the run build links %s", pkg)
		}
	}
}
