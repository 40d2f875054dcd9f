package guest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestLeanDependencies: the SDK's default path, package guest and package
// k8s built for wasip1, imports neither fmt, reflect nor encoding/json,
// which would add 0.7 to 1.9 MB to every module (docs/benchmarks.md);
// package stdjson opts in to encoding/json.
func TestLeanDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".", "./k8s", "./decode")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list listed %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		switch d {
		case "fmt", "reflect", "encoding/json":
			t.Errorf("the SDK imports %s for wasip1", d)
		}
	}
}
