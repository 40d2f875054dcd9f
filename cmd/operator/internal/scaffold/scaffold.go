// Package scaffold writes the directory of a new wasmreconcile module:
// its go.mod, a reconcile handler built on the guest SDK, a native test, a
// test case for `operator test`, a CRD skeleton, a Makefile and its RBAC.
// It backs `operator init`. The templates are embedded (templates/*.tmpl)
// and rendered with text/template; the Go files are gofmt'd.
//
// The package checks nothing about names and kinds beyond what it needs to
// render them: the caller validates the module name and the kinds first
// (cmd/operator's init.go).
package scaffold

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/internal/decodegen"
	"github.com/wasmreconcile/wasmreconcile/internal/sdkarchive"
)

// SDKModule is the module path of the guest SDK.
const SDKModule = "github.com/wasmreconcile/wasmreconcile/guest-sdk"

// SDKEnv is the environment variable that names a guest-sdk checkout when
// --sdk is not given.
const SDKEnv = "WASMRECONCILE_SDK"

//go:embed templates/*.tmpl
var templates embed.FS

// Kind is a kind the module reconciles, owns or reads, with the resource
// name its RBAC and CRD use.
type Kind struct {
	Group, Version, Kind string
	// Plural is the lower-case plural resource name, such as "webapps".
	Plural string
}

// APIVersion is the kind's apiVersion: "group/version", or "version" for
// the core group.
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// Singular is the lower-case kind, the CRD's singular name.
func (k Kind) Singular() string { return strings.ToLower(k.Kind) }

// Options say what to scaffold.
type Options struct {
	// Name is the module's name: a lower-case DNS label, also its Go
	// module path and the name of its .wasm file.
	Name string
	// Dir is the directory to create; it must not exist, or be empty.
	Dir string
	// SDK is the directory of a guest-sdk checkout (see FindSDK), which
	// go.mod's replace directive points at.
	SDK string
	// EmbeddedSDK, used when SDK is "", is an SDK archive (package
	// internal/sdkarchive; see EmbeddedSDK) that Write unpacks into
	// Dir/guest-sdk, the module's own copy, which go.mod's replace
	// directive then points at: the module builds with nothing outside
	// its directory.
	EmbeddedSDK []byte
	// For is the reconciled kind; Owns the kinds of its children; Reads
	// the other kinds it may read.
	For   Kind
	Owns  []Kind
	Reads []Kind
	// CRD, when true, writes crds/PLURAL.GROUP.yaml, a CustomResourceDefinition
	// for For. Leave it false for a built-in kind.
	CRD bool
	// RBAC is the content of rbac.yaml, as `operator rbac` prints it for
	// the module's manifest; nil writes no rbac.yaml.
	RBAC []byte
	// Operator is the operator command the Makefile runs (`operator test`,
	// `operator rbac`); "" is "operator", found on $PATH.
	Operator string
	// ServiceAccount is the NAMESPACE/NAME that `make rbac` binds the
	// module's rights to; RBAC should be generated for the same account.
	ServiceAccount string
	// Lang is the module's language: LangGo (the default, "") or LangRust,
	// which writes module.rs on the Rust SDK (SDK/rust) and a Makefile
	// that builds it with rustc.
	Lang string
}

// Languages of Options.Lang.
const (
	LangGo   = "go"
	LangRust = "rust"
)

// rustSDKFile is the Rust SDK's one source file, under the guest-sdk
// directory.
var rustSDKFile = filepath.Join("rust", "src", "lib.rs")

// File is a file Write wrote, relative to Options.Dir, and what it is for.
type File struct {
	Path, About string
}

// data is what the templates see.
type data struct {
	Options
	SDKVersion string // the go directive of the SDK's go.mod
	Replace    string // the replace directive's target
	ConfigMap  bool   // the module owns v1 ConfigMaps: it makes one child
	Others     []Kind // owned kinds it makes no child of (a TODO each)
	CRDFile    string // crds/PLURAL.GROUP.yaml, or ""
	Operator   string
	SDKModule  string
	RustSDK    string // the Rust SDK's source file (LangRust)
	// FailedChild is the owned kind of the child-failure case: the first
	// of Owns.
	FailedChild Kind
	// Typed: a Go module of a custom kind, whose spec and status are Go
	// types in APIDir (api/VERSION), the source of its CRD (controller-gen,
	// through crdgen/) and of its decoders (operator generate).
	Typed  bool
	APIDir string
	// Apimachinery is the k8s.io/apimachinery version crdgen/ requires;
	// CRDGenReplace the SDK's directory as crdgen/go.mod reaches it.
	Apimachinery  string
	CRDGenReplace string
	// ControllerGen is the controller-tools version make manifests runs.
	ControllerGen string
}

// Versions of the tools a typed scaffold's make manifests uses: pinned,
// and fetched from the module proxy by go run.
const (
	ControllerToolsVersion = "v0.23.0"
	ApimachineryVersion    = "v0.37.2"
)

// Write creates opts.Dir and writes the module into it, and returns the
// files it wrote in the order written. It refuses a directory that exists
// and is not empty, and writes nothing then. When rendering fails midway,
// the files already written are left for inspection and the error says so.
func Write(opts Options) ([]File, error) {
	if err := checkEmpty(opts.Dir); err != nil {
		return nil, err
	}
	var sdkFile []File
	if opts.SDK == "" {
		if opts.EmbeddedSDK == nil {
			return nil, errors.New("scaffold: no SDK: set Options.SDK or Options.EmbeddedSDK")
		}
		dir := filepath.Join(opts.Dir, EmbeddedSDKDir)
		if err := sdkarchive.Extract(opts.EmbeddedSDK, dir); err != nil {
			return nil, fmt.Errorf("unpacking the guest SDK this binary carries into %s: %w", dir, err)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		opts.SDK = abs
		sdkFile = []File{{Path: EmbeddedSDKDir + "/", About: "the guest SDK this operator carries (sha256 " + sdkarchive.Digest(opts.EmbeddedSDK)[:16] + "); commit it with the module"}}
	}
	d, err := prepare(opts)
	if err != nil {
		return sdkFile, err
	}
	rust := opts.Lang == LangRust
	files := []struct {
		tmpl, path, about string
		skip              bool
	}{
		{"go.mod.tmpl", "go.mod", "requires the guest SDK, replaced by " + d.Replace, rust},
		{"main.go.tmpl", "main.go", "the manifest and the reconcile handler", rust},
		{"main_test.go.tmpl", "main_test.go", "native tests of the handler (go test), with package sdktest", rust},
		{"module.rs.tmpl", "module.rs", "the manifest, the reconcile handler and its native tests (rustc --test), on the Rust SDK", !rust},
		{"case.yaml.tmpl", filepath.Join("testdata", "cases", "reconcile.yaml"), "a case for `operator test` on the built .wasm", false},
		{"child-failure.yaml.tmpl", filepath.Join("testdata", "cases", "child-failure.yaml"), "a case: a child the API server refused shows in Ready", len(opts.Owns) == 0},
		{"types.go.tmpl", d.APIDir + "/types.go", "the " + opts.For.Kind + " kind's spec and status as Go types with kubebuilder markers: the source of its CRD and decoders", !d.Typed},
		{"crdgen-go.mod.tmpl", "crdgen/go.mod", "the kind's root type for controller-gen, a module of its own (make manifests)", !d.Typed},
		{"crdgen-root.go.tmpl", "crdgen/" + opts.For.Version + "/" + opts.For.Singular() + ".go", "the root type of " + opts.For.Kind + ", around api/" + opts.For.Version + "'s spec and status", !d.Typed},
		{"crd-gen.yaml.tmpl", d.CRDFile, "the CustomResourceDefinition of " + opts.For.Kind + ", as make manifests writes it from api/" + opts.For.Version, !d.Typed},
		{"crd.yaml.tmpl", d.CRDFile, "the CustomResourceDefinition of " + opts.For.Kind + ": describe its spec", !opts.CRD || d.Typed},
		{"Makefile.tmpl", "Makefile", "build (build/" + opts.Name + ".wasm), test, deploy (into deploy/, after the tests), rbac", rust},
		{"rust-Makefile.tmpl", "Makefile", "build (build/" + opts.Name + ".wasm, with rustc), test, deploy (into deploy/, after the tests), rbac", !rust},
		{"gitignore.tmpl", ".gitignore", "ignores build/ and deploy/", rust},
		{"rust-gitignore.tmpl", ".gitignore", "ignores build/, deploy/ and target/", !rust},
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{"quote": quote, "typed": typedKind}).ParseFS(templates, "templates/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("scaffold: parsing templates: %w", err) // a bug in this package
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	wrote := sdkFile
	write := func(path string, b []byte) error {
		full := filepath.Join(opts.Dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		return os.WriteFile(full, b, 0o644)
	}
	for _, f := range files {
		if f.skip {
			continue
		}
		var buf bytes.Buffer
		if err := tmpl.ExecuteTemplate(&buf, f.tmpl, d); err != nil {
			return wrote, fmt.Errorf("scaffold: rendering %s: %w", f.path, err)
		}
		b := buf.Bytes()
		if f.tmpl == "crd-gen.yaml.tmpl" {
			if b, err = asControllerGen(b); err != nil {
				return wrote, fmt.Errorf("scaffold: %s: %w (a bug in its template)", f.path, err)
			}
		}
		if strings.HasSuffix(f.path, ".go") {
			if b, err = format.Source(b); err != nil {
				return wrote, fmt.Errorf("scaffold: %s is not valid Go (a bug in its template; the files written so far are in %s): %w", f.path, opts.Dir, err)
			}
		}
		if err := write(f.path, b); err != nil {
			return wrote, err
		}
		wrote = append(wrote, File{Path: f.path, About: f.about})
	}
	if d.Typed {
		src, err := decodegen.Generate(filepath.Join(opts.Dir, d.APIDir))
		if err != nil {
			return wrote, fmt.Errorf("scaffold: generating the decoders of %s (a bug in its template): %w", d.APIDir, err)
		}
		path := d.APIDir + "/" + decodegen.FileName
		if err := write(path, src); err != nil {
			return wrote, err
		}
		wrote = append(wrote, File{Path: path, About: "the decoders of the types (operator generate; make manifests regenerates them)"})
	}
	if opts.RBAC != nil {
		if err := write("rbac.yaml", opts.RBAC); err != nil {
			return wrote, err
		}
		wrote = append(wrote, File{Path: "rbac.yaml", About: "the RBAC of the module's account and of the operator's watches (`make rbac` regenerates it)"})
	}
	return wrote, nil
}

// prepare computes the templates' data.
func prepare(opts Options) (data, error) {
	d := data{Options: opts, Operator: opts.Operator, SDKModule: SDKModule}
	if d.Operator == "" {
		d.Operator = "operator"
	}
	var err error
	if d.SDKVersion, err = checkSDK(opts.SDK); err != nil {
		return data{}, err
	}
	if d.Replace, err = replacePath(opts.Dir, opts.SDK); err != nil {
		return data{}, err
	}
	switch opts.Lang {
	case "", LangGo:
	case LangRust:
		// As go.mod's replace: relative when the module is inside the
		// checkout (or holds its own copy), so that both can move.
		d.RustSDK = d.Replace + "/" + filepath.ToSlash(rustSDKFile)
		if _, err := os.Stat(filepath.Join(opts.SDK, rustSDKFile)); err != nil {
			return data{}, fmt.Errorf("the guest SDK at %s has no Rust SDK (%s): %w; pass --sdk with the guest-sdk directory of a checkout that has one", opts.SDK, rustSDKFile, err)
		}
	default:
		return data{}, fmt.Errorf("scaffold: unknown language %q; use %q or %q", opts.Lang, LangGo, LangRust)
	}
	if len(opts.Owns) > 0 {
		d.FailedChild = opts.Owns[0]
	}
	for _, k := range opts.Owns {
		if k.Group == "" && k.Kind == "ConfigMap" {
			d.ConfigMap = true
		} else {
			d.Others = append(d.Others, k)
		}
	}
	if opts.CRD {
		// The name controller-gen gives it.
		d.CRDFile = filepath.Join("crds", opts.For.Group+"_"+opts.For.Plural+".yaml")
		d.Typed = opts.Lang != LangRust
	}
	if d.Typed {
		d.APIDir = "api/" + opts.For.Version
		d.Apimachinery, d.ControllerGen = ApimachineryVersion, ControllerToolsVersion
		d.CRDGenReplace = d.Replace
		if !filepath.IsAbs(filepath.FromSlash(d.Replace)) {
			d.CRDGenReplace = "../" + strings.TrimPrefix(d.Replace, "./")
		}
	}
	return d, nil
}

// asControllerGen writes the YAML document b as controller-gen writes a
// CRD (genall.WriteYAML): "---", then sigs.k8s.io/yaml's encoding of its
// JSON, keys sorted, integers exact.
func asControllerGen(b []byte) ([]byte, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return append([]byte("---\n"), out...), nil
}

// typedKind reports whether package k8s of the guest SDK has a type, with
// a Spec, for k's kind.
func typedKind(k Kind) bool {
	switch k.APIVersion() + "/" + k.Kind {
	case "apps/v1/Deployment", "v1/Service", "v1/PersistentVolumeClaim", "batch/v1/Job", "batch/v1/CronJob", "networking.k8s.io/v1/Ingress":
		return true
	}
	return false
}

// quote renders s as a Go string literal.
func quote(s string) string { return fmt.Sprintf("%q", s) }

// checkEmpty refuses a directory that exists and holds anything.
func checkEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory; pass --dir with a new or empty directory", dir)
		}
		return err
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for i, e := range entries {
			if i == 3 {
				names = append(names, "...")
				break
			}
			names = append(names, e.Name())
		}
		return fmt.Errorf("%s exists and is not empty (%s): init never overwrites; pass --dir with a new or empty directory", dir, strings.Join(names, ", "))
	}
	return nil
}

// FindSDK returns the absolute directory of the guest-sdk checkout that a
// new module's go.mod replaces the SDK with: flag (--sdk) when it is set,
// else env ($WASMRECONCILE_SDK) when it is set, else the nearest
// guest-sdk/go.mod found walking up from start (the current directory),
// with start itself being the SDK when it holds the SDK's go.mod. When
// none is found, the error wraps ErrNoSDK: the caller may then use the SDK
// the binary carries (EmbeddedSDK), or say what to pass.
func FindSDK(flag, env, start string) (string, error) {
	var dir, from string
	switch {
	case flag != "":
		dir, from = flag, "--sdk"
	case env != "":
		dir, from = env, "$"+SDKEnv
	default:
		abs, err := filepath.Abs(start)
		if err != nil {
			return "", err
		}
		for d := abs; ; d = filepath.Dir(d) {
			for _, c := range []string{d, filepath.Join(d, "guest-sdk")} {
				if _, err := checkSDK(c); err == nil {
					return c, nil
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
		return "", fmt.Errorf("%w: no guest-sdk/go.mod of module %s in %s or any directory above it; its module path is not served by a module proxy, so a module builds against a local checkout: clone github.com/wasmreconcile/wasmreconcile and pass --sdk CHECKOUT/guest-sdk, or set %s", ErrNoSDK, SDKModule, abs, SDKEnv)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := checkSDK(abs); err != nil {
		return "", fmt.Errorf("%s %s: %w; pass the guest-sdk directory of a wasmreconcile checkout", from, dir, err)
	}
	return abs, nil
}

// checkSDK checks that dir holds the SDK's go.mod and returns its go
// directive's version.
func checkSDK(dir string) (goVersion string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("no go.mod of %s there", SDKModule)
	}
	module := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "module" {
			module = strings.Trim(f[1], `"`)
		}
		if len(f) == 2 && f[0] == "go" {
			goVersion = f[1]
		}
	}
	if module != SDKModule {
		return "", fmt.Errorf("its go.mod is of module %q, not %s", module, SDKModule)
	}
	if goVersion == "" {
		return "", fmt.Errorf("its go.mod has no go directive")
	}
	return goVersion, nil
}

// replacePath is the target of go.mod's replace directive for a module in
// dir: relative when the module is inside the checkout that holds the SDK
// (the SDK's parent directory), so that the checkout can move; absolute
// otherwise.
func replacePath(dir, sdk string) (string, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	root := filepath.Dir(sdk)
	if rel, err := filepath.Rel(root, absDir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		if r, err := filepath.Rel(absDir, sdk); err == nil {
			if !strings.HasPrefix(r, ".") {
				r = "./" + r
			}
			return filepath.ToSlash(r), nil
		}
	}
	return filepath.ToSlash(sdk), nil
}
