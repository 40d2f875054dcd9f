//go:build !runonly

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/wasmreconcile/wasmreconcile/cmd/operator/internal/scaffold"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// sdkDir is this checkout's guest SDK, found from the test's source.
func sdkDir() string { return filepath.Join(testwasm.RepoRoot(), "guest-sdk") }

// goTool runs the go command in dir, on the scaffold's own go.mod, and
// fails the test with its output if it fails.
func goTool(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the scaffold test needs the go command on $PATH: %v", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-mod=mod"}, env...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
}

// TestInitScaffold runs the whole path of a scaffolded module, as its
// Makefile does: init, go test on the handler, the wasm build, the cases
// through operator test's code, and rbac.yaml regenerated from the built
// module. It needs the Go toolchain and takes about a minute.
func TestInitScaffold(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	if testing.Short() {
		t.Skip("builds scaffolded modules with the go command; skipped with -short")
	}
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"children", []string{"--owns", "v1/ConfigMap", "--owns", "apps/v1/Deployment", "--reads", "v1/Secret"}},
		{"no-configmap", []string{"--owns", "apps/v1/Deployment"}},
		{"status-only", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo")
			var out, errOut bytes.Buffer
			args := append([]string{"demo", "--for", "demo.example.com/v1alpha1/Demo", "--dir", dir, "--sdk", sdkDir()}, c.flags...)
			if err := runInit(args, &out, &errOut); err != nil {
				t.Fatalf("init: %v\n%s", err, errOut.String())
			}
			files := []string{"go.mod", "main.go", "main_test.go", "testdata/cases/reconcile.yaml", "crds/demo.example.com_demos.yaml", "Makefile", ".gitignore", "rbac.yaml",
				"api/v1alpha1/types.go", "api/v1alpha1/zz_generated.decode.go", "crdgen/go.mod", "crdgen/v1alpha1/demo.go"}
			if len(c.flags) > 0 { // it owns a kind
				files = append(files, "testdata/cases/child-failure.yaml")
			}
			for _, f := range files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("init wrote no %s: %v", f, err)
				}
				if !strings.Contains(out.String(), f) {
					t.Errorf("init's output does not list %s:\n%s", f, out.String())
				}
			}
			if !strings.Contains(out.String(), "make test") {
				t.Errorf("init's output does not say what to run next:\n%s", out.String())
			}
			gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
			if !strings.Contains(string(gomod), "replace "+scaffold.SDKModule+" => "+filepath.ToSlash(sdkDir())) {
				t.Errorf("go.mod does not replace the SDK with %s:\n%s", sdkDir(), gomod)
			}
			makefile, _ := os.ReadFile(filepath.Join(dir, "Makefile"))
			for _, want := range []string{"GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -ldflags='-s -w' -o $@ .", "$(GO) test ./...", "$(OPERATOR) test --crds crds build/demo.wasm testdata/cases", "deploy: test"} {
				if !strings.Contains(string(makefile), want) {
					t.Errorf("Makefile lacks %q:\n%s", want, makefile)
				}
			}

			// The handler reads the spec through the generated decoders,
			// which are current, and a field the types do not declare is
			// a compile error.
			mainGo, _ := os.ReadFile(filepath.Join(dir, "main.go"))
			if !strings.Contains(string(mainGo), `v1alpha1.DecodeDemoSpec(req.Object["spec"], "spec")`) {
				t.Errorf("main.go does not decode the spec with the generated decoder:\n%s", mainGo)
			}
			var genOut bytes.Buffer
			if err := runGenerate([]string{"--check", filepath.Join(dir, "api", "v1alpha1")}, &genOut, &errOut); err != nil {
				t.Errorf("the decoders init wrote are not current: %v", err)
			}
			goTool(t, dir, nil, "test", "./...")
			if c.name == "children" {
				typo := strings.Replace(string(mainGo), "spec.Message", "spec.Mesage", 1)
				if typo == string(mainGo) {
					t.Fatalf("main.go does not read spec.Message:\n%s", mainGo)
				}
				os.WriteFile(filepath.Join(dir, "main.go"), []byte(typo), 0o644)
				cmd := exec.Command("go", "vet", ".")
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
				if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "spec.Mesage undefined") {
					t.Errorf("a typo'd spec field compiles (%v):\n%s", err, out)
				}
				os.WriteFile(filepath.Join(dir, "main.go"), mainGo, 0o644)
			}
			wasm := filepath.Join(dir, "build", "demo.wasm")
			// As the Makefile builds it: -trimpath makes the bytes the same
			// in every temporary directory, so the tests' compilation
			// cache serves them from the second run on.
			goTool(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-trimpath", "-buildmode=c-shared", "-ldflags=-s -w", "-o", wasm, ".")

			checkScaffoldModule(t, dir, wasm)
			checkDeploy(t, dir, "demo")
		})
	}
}

// checkScaffoldModule runs what a scaffolded module's Makefile runs after
// its build, on wasm built in dir: its one case passes through operator
// test's code, and make rbac prints the rbac.yaml init wrote.
func checkScaffoldModule(t *testing.T, dir, wasm string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := runTest([]string{"--compilation-cache-dir=" + compiled, "--crds", filepath.Join(dir, "crds"), wasm, filepath.Join(dir, "testdata", "cases")}, &out, &errOut); err != nil {
		t.Fatalf("operator test on the scaffold's cases: %v\n%s%s", err, out.String(), errOut.String())
	}
	cases, err := modtest.LoadDir(filepath.Join(dir, "testdata", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d passed, 0 failed", len(cases)); !strings.Contains(out.String(), want) {
		t.Errorf("operator test: want %s, got:\n%s", want, out.String())
	}
	out.Reset()
	if err := runRBAC([]string{"--crds", filepath.Join(dir, "crds"), "--service-account", "wasmreconcile-modules/demo", wasm}, &out, &errOut); err != nil {
		t.Fatalf("operator rbac: %v", err)
	}
	written, _ := os.ReadFile(filepath.Join(dir, "rbac.yaml"))
	if out.String() != string(written) {
		t.Errorf("operator rbac on the built module differs from the rbac.yaml init wrote:\n--- operator rbac\n%s\n--- rbac.yaml\n%s", out.String(), written)
	}
}

// checkDeploy runs the scaffold's make deploy with a stand-in for the
// operator command (its tests are checkScaffoldModule's): when the cases
// fail, nothing reaches deploy/, the directory operator dev watches, and
// make test alone never writes there; when they pass, the tested module
// does, whole.
func checkDeploy(t *testing.T, dir, name string, vars ...string) {
	t.Helper()
	deployed := filepath.Join(dir, "deploy", name+".wasm")
	mk := func(target, operatorCmd string) ([]byte, error) {
		cmd := exec.Command("make", append([]string{target, "OPERATOR=" + operatorCmd}, vars...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		return cmd.CombinedOutput()
	}
	if out, err := mk("test", "true"); err != nil {
		t.Fatalf("make test: %v\n%s", err, out)
	}
	if _, err := os.Stat(deployed); err == nil {
		t.Fatalf("make test wrote %s: a module goes live without make deploy", deployed)
	}
	if out, err := mk("deploy", "false"); err == nil {
		t.Fatalf("make deploy succeeded with failing cases:\n%s", out)
	}
	if _, err := os.Stat(deployed); err == nil {
		t.Fatalf("make deploy with failing cases wrote %s", deployed)
	}
	if out, err := mk("deploy", "true"); err != nil {
		t.Fatalf("make deploy: %v\n%s", err, out)
	}
	built, _ := os.ReadFile(filepath.Join(dir, "build", name+".wasm"))
	if got, err := os.ReadFile(deployed); err != nil || len(built) == 0 || !bytes.Equal(got, built) {
		t.Errorf("make deploy: %s is not the tested module (%d bytes, built %d): %v", deployed, len(got), len(built), err)
	}
}

// rustc is the Rust compiler the Rust scaffold's Makefile runs: $RUSTC,
// else Debian's /usr/bin/rustc, which make test installs (make
// toolchain-rust).
func rustc(t *testing.T) string {
	t.Helper()
	r := os.Getenv("RUSTC")
	if r == "" {
		r = "/usr/bin/rustc"
	}
	if _, err := os.Stat(r); err != nil {
		t.Fatalf("the Rust scaffold test needs rustc with the wasm32-wasi standard library: %v; run make toolchain-rust, or set RUSTC", err)
	}
	return r
}

// TestInitScaffoldRust runs the whole path of a module scaffolded with
// --lang rust through its own Makefile: its native tests (rustc --test)
// and its wasm build with rustc, then the cases through operator test's
// code, and rbac.yaml regenerated from the built module.
func TestInitScaffoldRust(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	if testing.Short() {
		t.Skip("builds scaffolded modules with rustc; skipped with -short")
	}
	rc := rustc(t)
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"children", []string{"--owns", "v1/ConfigMap", "--owns", "apps/v1/Deployment", "--reads", "v1/Secret"}},
		{"status-only", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "demo")
			var out, errOut bytes.Buffer
			args := append([]string{"demo", "--lang", "rust", "--for", "demo.example.com/v1alpha1/Demo", "--dir", dir, "--sdk", sdkDir()}, c.flags...)
			if err := runInit(args, &out, &errOut); err != nil {
				t.Fatalf("init: %v\n%s", err, errOut.String())
			}
			for _, f := range []string{"module.rs", "testdata/cases/reconcile.yaml", "crds/demo.example.com_demos.yaml", "Makefile", ".gitignore", "rbac.yaml"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("init wrote no %s: %v", f, err)
				}
				if !strings.Contains(out.String(), f) {
					t.Errorf("init's output does not list %s:\n%s", f, out.String())
				}
			}
			for _, f := range []string{"go.mod", "main.go", "main_test.go"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("init --lang rust wrote the Go module's %s", f)
				}
			}
			mk := exec.Command("make", "test-native", "build", "RUSTC="+rc)
			mk.Dir = dir
			if b, err := mk.CombinedOutput(); err != nil {
				t.Fatalf("make test-native build: %v\n%s", err, b)
			} else if !strings.Contains(string(b), "test result: ok. 2 passed") || strings.Contains(string(b), "warning") {
				t.Errorf("make test-native build: want the module's 2 native tests passing and no warning:\n%s", b)
			}
			checkScaffoldModule(t, dir, filepath.Join(dir, "build", "demo.wasm"))
			checkDeploy(t, dir, "demo", "RUSTC="+rc)
		})
	}
	t.Run("unknown-language", func(t *testing.T) {
		var out, errOut bytes.Buffer
		err := runInit([]string{"demo", "--lang", "cobol", "--for", "demo.example.com/v1/Demo", "--dir", filepath.Join(t.TempDir(), "d"), "--sdk", sdkDir()}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), `--lang "cobol": want go or rust`) {
			t.Errorf("init --lang cobol: %v, want an error naming the flag and the choices", err)
		}
	})
}

func TestInitErrors(t *testing.T) {
	sdk := sdkDir()
	tmp := t.TempDir()
	full := filepath.Join(tmp, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	notSDK := filepath.Join(tmp, "notsdk")
	if err := os.MkdirAll(notSDK, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notSDK, "go.mod"), []byte("module example.com/other\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	forFlag := []string{"--for", "demo.example.com/v1/Demo", "--sdk", sdk}
	with := func(name string, extra ...string) []string {
		return append(append([]string{name, "--dir", filepath.Join(tmp, "new-"+name)}, forFlag...), extra...)
	}
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{nil, "want one module NAME"},
		{[]string{"a", "b", "--for", "x.io/v1/X"}, "want one module NAME"},
		{with("Demo"), `module NAME "Demo" must be a lower-case DNS label`},
		{with("demo_1"), "must be a lower-case DNS label"},
		{[]string{"demo", "--sdk", sdk}, "--for is required"},
		{[]string{"demo", "--for", "Demo", "--sdk", sdk}, `--for "Demo": want GROUP/VERSION/KIND`},
		{[]string{"demo", "--for", "a/b/c/D", "--sdk", sdk}, `--for "a/b/c/D": want GROUP/VERSION/KIND`},
		{[]string{"demo", "--for", "/v1/Demo", "--sdk", sdk}, `--for "/v1/Demo": want GROUP/VERSION/KIND`},
		{[]string{"demo", "--for", "demo.example.com/v1/demo", "--sdk", sdk}, `--for "demo.example.com/v1/demo": kind "demo" must be an UpperCamelCase name`},
		{[]string{"demo", "--for", "Demo.Example.com/v1/Demo", "--sdk", sdk}, `group "Demo.Example.com" is not a lower-case DNS subdomain`},
		{[]string{"demo", "--for", "demo.example.com/1/Demo", "--sdk", sdk}, `--for "demo.example.com/1/Demo": version "1" is not a Kubernetes API version`},
		{[]string{"demo", "--for", "demo/v1/Demo", "--sdk", sdk}, `--for demo/v1/Demo: the group "demo" of a custom kind must be a domain with a dot`},
		{with("demo", "--owns", "apps/Deployment"), `--owns "apps/Deployment": version "apps" is not a Kubernetes API version`},
		{with("demo", "--reads", "v1/secret"), `--reads "v1/secret": kind "secret" must be an UpperCamelCase name`},
		{with("demo", "--owns", "demo.example.com/v2/Demo"), "--owns demo.example.com/v2/Demo is the kind of --for: a module cannot own objects of the kind it reconciles"},
		{with("demo", "--owns", "v1/ConfigMap", "--owns", "v1/ConfigMap"), "--owns v1/ConfigMap: kind ConfigMap is already given by --owns"},
		{with("demo", "--owns", "v1/ConfigMap", "--reads", "v1/ConfigMap"), "--reads v1/ConfigMap: kind ConfigMap is already given by --owns; a module may read the kinds of --for and --owns without listing them"},
		{with("demo", "--owns", "v1/Namespace"), "--owns: owns[0] is Namespace, a cluster-scoped kind, but the reconciled kind Demo is namespaced"},
		{append([]string{"demo", "--dir", full}, forFlag...), "full exists and is not empty (keep.txt): init never overwrites; pass --dir with a new or empty directory"},
		{append([]string{"demo", "--dir", file}, forFlag...), "file exists and is not a directory"},
		{[]string{"demo", "--dir", filepath.Join(tmp, "x"), "--for", "demo.example.com/v1/Demo", "--sdk", filepath.Join(tmp, "nothing")}, "--sdk " + filepath.Join(tmp, "nothing") + ": no go.mod of " + scaffold.SDKModule + " there; pass the guest-sdk directory of a wasmreconcile checkout"},
		{[]string{"demo", "--dir", filepath.Join(tmp, "y"), "--for", "demo.example.com/v1/Demo", "--sdk", notSDK}, `its go.mod is of module "example.com/other", not ` + scaffold.SDKModule},
		{[]string{"demo", "--no-such-flag"}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		err := runInit(c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("init %q: error = %v, want one containing %q", c.args, err, c.wantErr)
		}
	}
	// Nothing was written over, or next to, what existed.
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("init wrote into the non-empty directory: %v", entries)
	}
	for _, name := range []string{"new-Demo", "new-demo", "x", "y"} {
		if _, err := os.Stat(filepath.Join(tmp, name)); err == nil {
			t.Errorf("init refused, yet created %s", name)
		}
	}
}

// TestInitFindsTheSDK checks where init looks for the SDK when --sdk is
// not given: $WASMRECONCILE_SDK, then up from the current directory, and
// the error when there is none.
func TestInitFindsTheSDK(t *testing.T) {
	sdk := sdkDir()
	args := func(dir string) []string {
		return []string{"demo", "--for", "demo.example.com/v1/Demo", "--dir", dir}
	}
	replace := func(dir string) string {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		_, target, _ := strings.Cut(string(b), scaffold.SDKModule+" => ")
		return strings.TrimSpace(target)
	}
	var out, errOut bytes.Buffer

	// From the environment.
	t.Setenv(scaffold.SDKEnv, sdk)
	dir := filepath.Join(t.TempDir(), "env")
	if err := runInit(args(dir), &out, &errOut); err != nil {
		t.Fatalf("init with $%s: %v", scaffold.SDKEnv, err)
	}
	if got := replace(dir); got != filepath.ToSlash(sdk) {
		t.Errorf("with $%s, replace => %s, want %s", scaffold.SDKEnv, got, sdk)
	}

	// Walking up from the current directory: this package's, inside the
	// checkout; the module is outside it, so the path is absolute.
	t.Setenv(scaffold.SDKEnv, "")
	dir = filepath.Join(t.TempDir(), "walk")
	if err := runInit(args(dir), &out, &errOut); err != nil {
		t.Fatalf("init from inside the checkout: %v", err)
	}
	if got := replace(dir); got != filepath.ToSlash(sdk) {
		t.Errorf("found walking up, replace => %s, want %s", got, sdk)
	}

	// None, and a binary that carries no SDK: the error says what to pass.
	t.Chdir(t.TempDir())
	carried := embeddedSDK
	embeddedSDK = func() []byte { return nil }
	defer func() { embeddedSDK = carried }()
	err := runInit(args(filepath.Join(t.TempDir(), "none")), &out, &errOut)
	for _, want := range []string{"no guest SDK found", "pass --sdk CHECKOUT/guest-sdk, or set " + scaffold.SDKEnv, "this operator binary carries no SDK either"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("init with no SDK anywhere: error = %v, want one containing %q", err, want)
		}
	}
}

// TestInitWithTheSDKItCarries runs init where no checkout is at hand: the
// module gets its own copy of the SDK the binary carries and builds and
// tests with nothing outside its directory and no module proxy.
func TestInitWithTheSDKItCarries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scaffolded module with the go command; skipped with -short")
	}
	if embeddedSDK() == nil {
		t.Fatalf("this test binary carries no guest SDK archive (%s): run make sdk-zip (make test does)", "cmd/operator/internal/scaffold/sdk/guest-sdk.zip")
	}
	t.Setenv(scaffold.SDKEnv, "")
	t.Chdir(t.TempDir())
	dir := filepath.Join(t.TempDir(), "shop")
	var out, errOut bytes.Buffer
	if err := runInit([]string{"shop", "--for", "shop.example.com/v1/Shop", "--owns", "v1/ConfigMap", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("init outside a checkout: %v", err)
	}
	gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	if !strings.Contains(string(gomod), scaffold.SDKModule+" => ./guest-sdk\n") {
		t.Errorf("go.mod does not replace the SDK with the module's own copy:\n%s", gomod)
	}
	if !strings.Contains(out.String(), "guest-sdk/ ") || !strings.Contains(out.String(), "the guest SDK this operator carries (sha256 ") {
		t.Errorf("init's output does not list the SDK it unpacked:\n%s", out.String())
	}
	for _, f := range []string{"go.mod", "guest.go", "k8s/core.go", "sdktest/sdktest.go", "rust/src/lib.rs"} {
		if _, err := os.Stat(filepath.Join(dir, "guest-sdk", f)); err != nil {
			t.Errorf("the module's SDK copy lacks %s: %v", f, err)
		}
	}
	// Offline: no module proxy, so everything comes from the directory.
	offline := []string{"GOPROXY=off"}
	goTool(t, dir, offline, "test", "./...")
	wasm := filepath.Join(dir, "build", "shop.wasm")
	goTool(t, dir, append(offline, "GOOS=wasip1", "GOARCH=wasm"), "build", "-trimpath", "-buildmode=c-shared", "-ldflags=-s -w", "-o", wasm, ".")
	var testOut bytes.Buffer
	if err := runTest([]string{"--compilation-cache-dir=" + compiled, "--crds", filepath.Join(dir, "crds"), wasm, filepath.Join(dir, "testdata", "cases")}, &testOut, &errOut); err != nil {
		t.Fatalf("operator test on the module built on the carried SDK: %v\n%s", err, testOut.String())
	}
}

// TestInitCasesLoad checks, without the toolchain, that every variant's
// case file is a valid modtest case and its rbac.yaml names the right
// account.
func TestInitCasesLoad(t *testing.T) {
	for _, flags := range [][]string{nil, {"--owns", "v1/ConfigMap"}, {"--owns", "batch/v1/Job", "--reads", "v1/Secret"}} {
		dir := filepath.Join(t.TempDir(), "demo")
		var out, errOut bytes.Buffer
		if err := runInit(append([]string{"demo", "--for", "demo.example.com/v1/Demo", "--dir", dir, "--sdk", sdkDir()}, flags...), &out, &errOut); err != nil {
			t.Fatalf("init %q: %v", flags, err)
		}
		if _, err := modtest.LoadDir(filepath.Join(dir, "testdata", "cases")); err != nil {
			t.Errorf("init %q: the case does not load: %v", flags, err)
		}
		rbac, _ := os.ReadFile(filepath.Join(dir, "rbac.yaml"))
		_, bindings, _ := rbacDocs(t, rbac)
		if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "demo", Namespace: "wasmreconcile-modules"}}; len(bindings) != 1 || !reflect.DeepEqual(bindings[0].Subjects, want) {
			t.Errorf("init %q: rbac.yaml binds no wasmreconcile-modules/demo:\n%s", flags, rbac)
		}
	}

	// A built-in kind has no CRD.
	dir := filepath.Join(t.TempDir(), "cm")
	var out, errOut bytes.Buffer
	if err := runInit([]string{"cm", "--for", "v1/ConfigMap", "--dir", dir, "--sdk", sdkDir()}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "crds")); err == nil {
		t.Errorf("init wrote a CRD for a built-in kind")
	}
	if !strings.Contains(out.String(), "no CRD: v1 ConfigMap is a built-in kind") {
		t.Errorf("init does not say why it wrote no CRD:\n%s", out.String())
	}
}
