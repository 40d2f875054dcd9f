package decodegen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// checkProgram is the test run in the generated package: every decoder's
// result is encoding/json's for the same JSON, and a wrong JSON type is an
// error naming its path.
const checkProgram = `package kinds

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

func tree(t *testing.T, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDecodersAgreeWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"{}",
		"null",
		` + "`" + `{"spec": {"owner": "o", "tier": 2, "message": "hi", "replicas": 3, "size": 9007199254740991, "ratio": 0.5,
		  "phase": "Ready", "ports": [{"name": "http", "port": 80, "weight": 1.5, "disabled": true}],
		  "portPtrs": [{"name": "a", "port": 1}, null], "byName": {"x": {"name": "x", "port": 2}},
		  "matrix": [[1, 2], [], [3]], "labels": {"a": "b"}, "nested": {"k": ["v", "w"]}, "names": ["n"],
		  "raw": {"deep": [1, {"x": null}]}, "anything": [true], "legacy": "l", "primary": {"name": "p", "port": 443},
		  "Untagged": "u", "Skipped": "must not be read", "A": "a", "B": "b", "unknown": 1},
		 "status": {"observedGeneration": 4, "conditions": [{"type": "Ready", "status": "True", "reason": "R",
		  "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 4}],
		  "last": {"type": "X", "status": "False"}}}` + "`" + `,
		` + "`" + `{"spec": {"replicas": null, "ports": [], "labels": {}, "primary": null}}` + "`" + `,
	} {
		var want Widget
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeWidget(tree(t, s), "")
		if err != nil {
			t.Fatalf("DecodeWidget(%s): %v", s, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeWidget(%s)\n got %#v\nwant %#v", s, got, want)
		}
	}
	var _ guest.Condition
}

func TestDecodersNameTheWrongMember(t *testing.T) {
	for s, want := range map[string]string{
		` + "`" + `{"spec": {"message": 3}}` + "`" + `:                                  ".spec.message: want a string, got the number 3",
		` + "`" + `{"spec": {"replicas": "3"}}` + "`" + `:                                ".spec.replicas: want an integer, got a string \"3\"",
		` + "`" + `{"spec": {"replicas": 3000000000}}` + "`" + `:                         ".spec.replicas: want a 32-bit integer, got the number 3e+09",
		` + "`" + `{"spec": {"size": 1.5}}` + "`" + `:                                   ".spec.size: want an integer, got the number 1.5",
		` + "`" + `{"spec": {"ports": [{"name": "a", "port": 1}, {"port": true}]}}` + "`" + `: ".spec.ports[1].port: want an integer, got the boolean true",
		` + "`" + `{"spec": {"byName": {"x": []}}}` + "`" + `:                            ".spec.byName.x: want an object, got an array",
		` + "`" + `{"spec": {"matrix": [[1], ["a"]]}}` + "`" + `:                         ".spec.matrix[1][0]: want an integer, got a string \"a\"",
		` + "`" + `{"spec": {"tier": "x"}}` + "`" + `:                                   ".spec.tier: want an integer, got a string \"x\"",
		` + "`" + `{"spec": []}` + "`" + `:                                              ".spec: want an object, got an array",
		` + "`" + `{"status": {"conditions": [{"type": 1}]}}` + "`" + `:                  ".status.conditions[0].type: want a string, got the number 1",
	} {
		_, err := DecodeWidget(tree(t, s), "")
		if err == nil || err.Error() != want {
			t.Errorf("DecodeWidget(%s): error %v, want %q", s, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "want") {
			t.Errorf("error %q says not what was wanted", err)
		}
	}
}
`

// TestGeneratedDecoders generates the decoders of testdata/kinds in a
// module of its own and runs checkProgram there, natively and built for
// wasip1 (the guest's target), offline.
func TestGeneratedDecoders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a generated package with the go command; skipped with -short")
	}
	dir := t.TempDir()
	sdk := filepath.Join(testwasm.RepoRoot(), "guest-sdk")
	gomod := "module kinds\n\ngo 1.26\n\nrequire github.com/wasmreconcile/wasmreconcile/guest-sdk v0.0.0-00010101000000-000000000000\n\nreplace github.com/wasmreconcile/wasmreconcile/guest-sdk => " + sdk + "\n"
	types, err := os.ReadFile(filepath.Join("testdata", "kinds", "types.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"go.mod": gomod, "types.go": string(types), "check_test.go": checkProgram} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), src, 0o644); err != nil {
		t.Fatal(err)
	}
	// Generated again, with its own output in the directory: the same.
	again, err := Generate(dir)
	if err != nil || string(again) != string(src) {
		t.Errorf("a second Generate differs (%v):\n%s", err, again)
	}
	if strings.Contains(string(src), "reflect") || strings.Contains(string(src), "encoding/json") {
		t.Errorf("the generated decoders use reflection:\n%s", src)
	}
	run := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off"}, env...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s\n--- %s\n%s", strings.Join(args, " "), err, out, FileName, src)
		}
	}
	run(nil, "test", "-count=1", ".")
	run([]string{"GOOS=wasip1", "GOARCH=wasm"}, "build", ".")
}

// TestGenerateRefusesWhatItCannotDecode checks that every type it cannot
// decode is an error naming the field and its position.
func TestGenerateRefusesWhatItCannotDecode(t *testing.T) {
	for src, want := range map[string]string{
		"type T struct { N uint32 }":                         "field N has type uint32, which operator generate cannot decode",
		"type T struct { N float32 `json:\"n\"` }":           "field N has type float32",
		"type T struct { M map[int]string }":                 "field M is a map with int keys",
		"type T struct { A [3]string }":                      "field A is an array; use a slice",
		"type T struct { X other.Thing }":                    "field X has type other.Thing",
		"type T struct { B []byte }":                         "field B has type byte",
		"type T struct { C chan int }":                       "field C has type chan int",
		"type T struct { *U }\ntype U struct{}":              "T embeds *U",
		"type T struct { U `json:\"u,inline\"` }":            "T embeds U, which is not a type of this package",
		"type T struct { X string `json:\",inline\"` }":      "field T.X is tagged inline but is not embedded",
		"type T[P any] struct { X P }":                       "type T has type parameters",
		"type T struct { C sdk.Condition }\nvar _ = sdk.GVK": "import the guest SDK as guest, not sdk",
	} {
		dir := t.TempDir()
		file := "package p\n\nimport sdk \"github.com/wasmreconcile/wasmreconcile/guest-sdk\"\n\nvar _ sdk.Condition\n\n" + src + "\n"
		if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Generate(dir)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "p.go:") {
			t.Errorf("Generate(%s): %v, want an error at p.go containing %q", src, err, want)
		}
	}
	main := t.TempDir()
	os.WriteFile(filepath.Join(main, "main.go"), []byte("package main\n\ntype T struct{}\n"), 0o644)
	if _, err := Generate(main); err == nil || !strings.Contains(err.Error(), "is package main") {
		t.Errorf("Generate on package main: %v", err)
	}
}
