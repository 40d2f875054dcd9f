//go:build !runonly

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wasmreconcile/wasmreconcile/cmd/operator/internal/scaffold"
	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/rbacgen"
)

const initUsage = `Usage: operator init NAME --for GROUP/VERSION/KIND [--owns GROUP/VERSION/KIND ...] [--reads GROUP/VERSION/KIND ...] [--dir DIR] [--sdk PATH] [--lang go|rust]

Writes a new module, NAME, into DIR (default ./NAME), which must not exist
or be empty:

  go.mod               requires the guest SDK, replaced by a local checkout
                       (or by guest-sdk/, the SDK this binary carries,
                       unpacked when no checkout is at hand)
  main.go              the manifest and a reconcile handler: status
                       observedGeneration and a Ready condition; with
                       --owns v1/ConfigMap, a ConfigMap child
  main_test.go         native tests of the handler (go test, package sdktest)
  testdata/cases/      cases for operator test
  api/VERSION/         for a custom kind: its spec and status as Go types
                       with kubebuilder markers, and their decoders
                       (operator generate)
  crdgen/              the kind's root type for controller-gen, a module
                       of its own (make manifests)
  crds/                the kind's CRD, GROUP_PLURAL.yaml, as make
                       manifests writes it from api/ (none for a built-in
                       kind)
  Makefile             build (GOOS=wasip1, -buildmode=c-shared), test,
                       manifests, deploy, rbac
  rbac.yaml            its RBAC, as operator rbac prints it, for the
                       account wasmreconcile-modules/NAME

With --lang rust, module.rs replaces go.mod, main.go and main_test.go: the
manifest, the handler and its native tests on the Rust SDK
(guest-sdk/rust), and the Makefile builds it with rustc alone (Debian's
rustc 1.63 and libstd-rust-dev-wasm32; no cargo, no crates).

Kinds are GROUP/VERSION/KIND (apps/v1/Deployment), or VERSION/KIND for the
core group (v1/ConfigMap). The SDK's module path is served by no module
proxy, so go.mod replaces it with a guest-sdk directory: --sdk, else
$WASMRECONCILE_SDK, else the nearest guest-sdk/go.mod above the current
directory (inside a checkout), else the SDK this binary carries, unpacked
into DIR/guest-sdk: the module then builds with nothing outside DIR.

Example:
  operator init shop --for shop.example.com/v1alpha1/Shop --owns v1/ConfigMap
  cd shop && make test

Flags:
`

// embeddedSDK is the SDK archive this binary carries; tests replace it.
var embeddedSDK = scaffold.EmbeddedSDK

// initAccountNamespace is the namespace of the account a scaffolded
// module's rbac.yaml binds: the one config/rbac lets the operator
// impersonate in.
const initAccountNamespace = "wasmreconcile-modules"

func runInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, initUsage); fs.PrintDefaults() }
	var (
		forKind, dir, sdk, lang string
		owns, reads             stringList
	)
	fs.StringVar(&forKind, "for", "", "GROUP/VERSION/KIND the module reconciles (required)")
	fs.Var(&owns, "owns", "GROUP/VERSION/KIND of the module's children (repeatable)")
	fs.Var(&reads, "reads", "GROUP/VERSION/KIND the module may read besides --for and --owns (repeatable)")
	fs.StringVar(&dir, "dir", "", "directory to write the module into; it must not exist, or be empty (default: ./NAME)")
	fs.StringVar(&lang, "lang", scaffold.LangGo, "the module's language: go, or rust (module.rs on guest-sdk/rust, built with Debian's rustc: apt-get install rustc libstd-rust-dev-wasm32)")
	fs.StringVar(&sdk, "sdk", "", "guest-sdk directory of a wasmreconcile checkout, which go.mod's replace points at (default: $"+scaffold.SDKEnv+", else the nearest guest-sdk/go.mod above the current directory)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 {
		return errors.New("operator init: want one module NAME; see operator init --help")
	}
	name := pos[0]
	if lang != scaffold.LangGo && lang != scaffold.LangRust {
		return fmt.Errorf("operator init: --lang %q: want go or rust", lang)
	}
	m, err := initManifest(name, forKind, owns, reads)
	if err != nil {
		return err
	}
	if dir == "" {
		dir = name
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	sdkDir, err := scaffold.FindSDK(sdk, os.Getenv(scaffold.SDKEnv), cwd)
	var embedded []byte
	if errors.Is(err, scaffold.ErrNoSDK) {
		if embedded = embeddedSDK(); embedded == nil {
			return fmt.Errorf("%w; this operator binary carries no SDK either (it was built with go build, not make operator)", err)
		}
	} else if err != nil {
		return err
	}

	_, builtin := protocol.Builtin.Namespaced(schema.GroupKind{Group: m.For.Group, Kind: m.For.Kind})
	kind := func(g abi.GroupVersionKind) scaffold.Kind {
		r, _ := rbacgen.Resource(g, nil)
		return scaffold.Kind{Group: g.Group, Version: g.Version, Kind: g.Kind, Plural: r}
	}
	opts := scaffold.Options{
		Name: name, Dir: dir, SDK: sdkDir, EmbeddedSDK: embedded, For: kind(m.For), CRD: !builtin,
		Operator:       operatorCommand(),
		ServiceAccount: initAccountNamespace + "/" + name,
		Lang:           lang,
	}
	for _, g := range m.Owns {
		opts.Owns = append(opts.Owns, kind(g))
	}
	for _, g := range m.Reads {
		opts.Reads = append(opts.Reads, kind(g))
	}
	// As `make rbac` prints it: with the CRD written here as --crds.
	ro := rbacOptions{ServiceAccount: opts.ServiceAccount}
	if opts.CRD {
		ro.Plurals = map[schema.GroupKind]string{{Group: m.For.Group, Kind: m.For.Kind}: opts.For.Plural}
	}
	if opts.RBAC, err = moduleRBAC(m, ro); err != nil {
		return err
	}
	files, err := scaffold.Write(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote module %s in %s:\n", name, dir)
	for _, f := range files {
		fmt.Fprintf(stdout, "  %-36s %s\n", filepath.ToSlash(f.Path), f.About)
	}
	if builtin {
		fmt.Fprintf(stdout, "no CRD: %s is a built-in kind; its status may have no room for the module's conditions\n", rbacgen.KindList([]abi.GroupVersionKind{m.For}))
	}
	fmt.Fprintf(stdout, "\nnext:\n  cd %s\n", dir)
	if lang == scaffold.LangRust {
		fmt.Fprintf(stdout, "  make test    # rustc --test; build build/%s.wasm with rustc; operator test on testdata/cases\n", name)
	} else {
		fmt.Fprintf(stdout, "  make test    # go test; build build/%s.wasm; operator test on testdata/cases\n", name)
	}
	fmt.Fprintf(stdout, "  make deploy  # make test, then the tested module into deploy/\n")
	if opts.CRD {
		fmt.Fprintf(stdout, "  %s dev --module-dir deploy --crds crds    # a local cluster running the module; make deploy reloads it\n", opts.Operator)
	} else {
		fmt.Fprintf(stdout, "  %s dev --module-dir deploy    # a local cluster running the module; make deploy reloads it\n", opts.Operator)
	}
	fmt.Fprintf(stdout, "on a cluster:\n")
	if opts.CRD {
		fmt.Fprintf(stdout, "  kubectl apply -f crds/ -f rbac.yaml\n")
	} else {
		fmt.Fprintf(stdout, "  kubectl apply -f rbac.yaml\n")
	}
	fmt.Fprintf(stdout, "  %s run --module-dir deploy --default-service-account %s\n", opts.Operator, opts.ServiceAccount)
	fmt.Fprintf(stdout, "(the operator impersonates %s: config/rbac lets it impersonate the accounts of %s)\n", opts.ServiceAccount, initAccountNamespace)
	return nil
}

var (
	dnsLabel    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	kindName    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	kubeVersion = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)
)

// initManifest checks init's NAME, --for, --owns and --reads, and returns
// the manifest they describe. Each error names what is wrong and the flag
// it came from.
func initManifest(name, forKind string, owns, reads []string) (abi.Manifest, error) {
	if !dnsLabel.MatchString(name) {
		return abi.Manifest{}, fmt.Errorf("module NAME %q must be a lower-case DNS label: a-z, 0-9 and '-', starting and ending with a letter or digit, at most 63 characters (such as shop or web-app)", name)
	}
	if forKind == "" {
		return abi.Manifest{}, errors.New("--for is required: the GROUP/VERSION/KIND the module reconciles, such as shop.example.com/v1alpha1/Shop")
	}
	m := abi.Manifest{Name: name}
	var err error
	if m.For, err = parseKind("--for", forKind); err != nil {
		return abi.Manifest{}, err
	}
	gk := schema.GroupKind{Group: m.For.Group, Kind: m.For.Kind}
	if _, builtin := protocol.Builtin.Namespaced(gk); !builtin && !strings.Contains(m.For.Group, ".") {
		return abi.Manifest{}, fmt.Errorf("--for %s: the group %q of a custom kind must be a domain with a dot, such as %s.example.com: a CRD's group must be", forKind, m.For.Group, orDefault(m.For.Group, "shop"))
	}
	seen := map[schema.GroupKind]string{gk: "--for"}
	for _, list := range []struct {
		flag  string
		in    []string
		out   *[]abi.GroupVersionKind
		again string
	}{
		{"--owns", owns, &m.Owns, ""},
		{"--reads", reads, &m.Reads, "; a module may read the kinds of --for and --owns without listing them"},
	} {
		for _, s := range list.in {
			g, err := parseKind(list.flag, s)
			if err != nil {
				return abi.Manifest{}, err
			}
			gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
			if prev, ok := seen[gk]; ok {
				if prev == "--for" && list.flag == "--owns" {
					return abi.Manifest{}, fmt.Errorf("--owns %s is the kind of --for: a module cannot own objects of the kind it reconciles; remove it", s)
				}
				return abi.Manifest{}, fmt.Errorf("%s %s: kind %s is already given by %s%s", list.flag, s, gk, prev, list.again)
			}
			seen[gk] = list.flag
			*list.out = append(*list.out, g)
		}
	}
	// The CRD init writes for a custom kind is namespaced.
	if err := protocol.CheckOwnership(m, protocol.Chain(protocol.Builtin, namespacedKinds{gk: true})); err != nil {
		return abi.Manifest{}, fmt.Errorf("--owns: %w", err)
	}
	return m, nil
}

// namespacedKinds knows the scope of the kinds it holds: namespaced.
type namespacedKinds map[schema.GroupKind]bool

func (k namespacedKinds) Namespaced(gk schema.GroupKind) (namespaced, known bool) {
	return k[gk], k[gk]
}

// parseKind parses s, the value of flag, as GROUP/VERSION/KIND, or
// VERSION/KIND for the core group.
func parseKind(flag, s string) (abi.GroupVersionKind, error) {
	want := fmt.Sprintf("%s %q: want GROUP/VERSION/KIND, such as apps/v1/Deployment, or VERSION/KIND for the core group, such as v1/ConfigMap", flag, s)
	parts := strings.Split(s, "/")
	var g abi.GroupVersionKind
	switch len(parts) {
	case 2:
		g = abi.GroupVersionKind{Version: parts[0], Kind: parts[1]}
	case 3:
		g = abi.GroupVersionKind{Group: parts[0], Version: parts[1], Kind: parts[2]}
		if g.Group == "" {
			return g, errors.New(want)
		}
	default:
		return g, errors.New(want)
	}
	if g.Group != "" {
		if errs := validation.IsDNS1123Subdomain(g.Group); len(errs) > 0 {
			return g, fmt.Errorf("%s %q: group %q is not a lower-case DNS subdomain, such as apps or shop.example.com", flag, s, g.Group)
		}
	}
	if !kubeVersion.MatchString(g.Version) {
		return g, fmt.Errorf("%s %q: version %q is not a Kubernetes API version such as v1, v1beta1 or v1alpha1; want GROUP/VERSION/KIND, or VERSION/KIND for the core group", flag, s, g.Version)
	}
	if !kindName.MatchString(g.Kind) {
		return g, fmt.Errorf("%s %q: kind %q must be an UpperCamelCase name of letters and digits, such as ConfigMap", flag, s, g.Kind)
	}
	return g, nil
}

// operatorCommand is the operator command a scaffold's Makefile runs: this
// binary's path when it is an operator binary that stays (not one `go run`
// built in a temporary directory), else "operator", found on $PATH.
func operatorCommand() string {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "operator" || strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "operator"
	}
	return exe
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
