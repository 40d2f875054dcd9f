package repocheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// layoutDirs reads the directories the README's Layout block names: an
// entry's path is its first field (a list "x/a/, b/, c/" names x/a's
// siblings x/b and x/c too),
// nested under the entry above it with less indentation.
func layoutDirs(t *testing.T, readme string) map[string]bool {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dirs := map[string]bool{}
	type level struct {
		indent int
		path   string
	}
	var stack []level
	in := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		switch {
		case line == "## Layout":
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(line, "## "):
			in = false
			continue
		case strings.HasPrefix(line, "```") || strings.TrimSpace(line) == "":
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := ""
		if len(stack) > 0 {
			parent = stack[len(stack)-1].path
		}
		// The paths: fields ending in "/" or "/," up to the description.
		var names []string
		for _, field := range strings.Fields(line) {
			name := strings.TrimSuffix(field, ",")
			if !strings.HasSuffix(name, "/") {
				break
			}
			names = append(names, strings.TrimSuffix(name, "/"))
		}
		for i, n := range names {
			if i > 0 { // a sibling of the first: "internal/a/, b/"
				n = filepath.Join(filepath.Dir(names[0]), n)
			}
			dirs[filepath.Join(parent, n)] = true
		}
		if len(names) == 1 {
			stack = append(stack, level{indent, filepath.Join(parent, names[0])})
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no Layout block in the README")
	}
	return dirs
}

// packageDirs lists the directories, relative to root, of the packages of
// the Go modules in root, guest-sdk and modules (tests included).
func packageDirs(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, mod := range []string{".", "guest-sdk", "modules"} {
		cmd := exec.Command("go", "list", "-e", "-f", "{{.Dir}}", "./...")
		cmd.Dir = filepath.Join(root, mod)
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, dir := range strings.Fields(string(b)) {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

// TestREADMELayoutNamesEveryPackage: every package directory is named in
// the README's Layout, itself or through its parent (the test guests of
// modules/internal/testguests, say), but never only through a top-level
// directory such as host/ or internal/, and every directory the Layout
// names exists.
func TestREADMELayoutNamesEveryPackage(t *testing.T) {
	root := testwasm.RepoRoot()
	listed := layoutDirs(t, filepath.Join(root, "README.md"))
	broad := map[string]bool{"host": true, "host/internal": true, "internal": true, "cmd": true, "hack": true, "modules": true, "guest-sdk": true, ".": true}
	for _, dir := range packageDirs(t, root) {
		if listed[dir] || (listed[filepath.Dir(dir)] && !broad[filepath.Dir(dir)]) {
			continue
		}
		t.Errorf("package directory %s is not in the README's Layout", dir)
	}
	for dir := range listed {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			t.Errorf("the README's Layout names %s/, which does not exist", dir)
		}
	}
}
