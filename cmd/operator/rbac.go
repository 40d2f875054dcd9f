//go:build !runonly

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/schemacheck"
	"github.com/wasmreconcile/wasmreconcile/internal/rbacgen"
)

const rbacUsage = `Usage: operator rbac [flags] MODULE.wasm

Loads a module offline (only its initializer and manifest export run) and
prints, as YAML, the least-privilege RBAC that its manifest implies
(docs/security.md):

  1. ClusterRole wasmreconcile-watch-NAME: get, list, watch on the kinds the
     module reconciles, owns and reads, for the operator's informers, which
     run as the operator in every namespace. It carries the label
     wasmreconcile.io/aggregate-to-operator, which aggregates it into the
     operator's ClusterRole (config/rbac).
  2. ClusterRole wasmreconcile-module-NAME: what the module's own writes,
     made as its ServiceAccount, and its reads need: its kind (and patch,
     update for a finalizer), its status, its children, the kinds it reads,
     and events.k8s.io Events.
  3. With --service-account, the binding of (2) to that account: a
     ClusterRoleBinding, or a RoleBinding in each --namespace.

Resource names are the kinds pluralized by the API server's default rule;
pass --crds DIR to take custom kinds' plurals from their CRDs. The output is
deterministic: rules merged per API group and verbs, sorted.

Examples:
  operator rbac webapp.wasm
  operator rbac --crds examples/crds --service-account wasmreconcile-modules/webapp webapp.wasm | kubectl apply -f -

Flags:
`

func runRBAC(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rbac", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, rbacUsage); fs.PrintDefaults() }
	var (
		opts       rbacOptions
		namespaces stringList
		crds       string
	)
	fs.StringVar(&opts.ServiceAccount, "service-account", "", "NAMESPACE/NAME of the ServiceAccount the module runs as: also print the binding of its ClusterRole to it")
	fs.Var(&namespaces, "namespace", "bind the module's ClusterRole to --service-account with a RoleBinding in this namespace only, confining the module to it (repeatable; default: a ClusterRoleBinding, every namespace)")
	fs.StringVar(&crds, "crds", "", "directory of CustomResourceDefinition YAML files: the plural resource names of custom kinds (default: guessed from the kind)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 {
		return errors.New("operator rbac: want one module, MODULE.wasm; see operator rbac --help")
	}
	opts.Namespaces = namespaces
	if crds != "" {
		schemas, err := schemacheck.LoadDir(crds)
		if err != nil {
			return fmt.Errorf("--crds: %w", err)
		}
		opts.Plurals = map[schema.GroupKind]string{}
		for _, gk := range schemas.Kinds() {
			opts.Plurals[gk], _ = schemas.Plural(gk)
		}
		opts.Scopes = schemas
	}
	m, err := readManifest(context.Background(), pos[0])
	if err != nil {
		return err
	}
	out, err := moduleRBAC(m, opts)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// readManifest loads the module at path, on wazero's interpreter (only its
// initializer and manifest run, so compiling would be wasted), and returns
// its manifest as the engine validated it.
func readManifest(ctx context.Context, path string) (abi.Manifest, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return abi.Manifest{}, err
	}
	eng, err := engine.New(engine.Options{Interpreter: true})
	if err != nil {
		return abi.Manifest{}, err
	}
	defer eng.Close(ctx)
	m, err := eng.Load(ctx, filepath.Base(path), wasm, engine.Limits{MaxInstances: 1, FreshInstancePerCall: true})
	if err != nil {
		return abi.Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	defer m.Close(ctx)
	return m.Manifest(), nil
}

// rbacOptions are operator rbac's flags: what rbacgen.Options takes, with
// the account as NAMESPACE/NAME.
type rbacOptions struct {
	ServiceAccount string // NAMESPACE/NAME; "" binds no one
	Namespaces     []string
	Plurals        map[schema.GroupKind]string
	Scopes         protocol.Scopes
}

// moduleRBAC returns the RBAC of a module with manifest m as YAML
// (rbacgen). The same manifest and options always give the same bytes.
func moduleRBAC(m abi.Manifest, opts rbacOptions) ([]byte, error) {
	ro := rbacgen.Options{Namespaces: opts.Namespaces, Plurals: opts.Plurals, Scopes: opts.Scopes}
	if opts.ServiceAccount != "" {
		ns, name, err := operator.ParseServiceAccount(opts.ServiceAccount)
		if err != nil {
			return nil, fmt.Errorf("--service-account: %w", err)
		}
		ro.ServiceAccount = types.NamespacedName{Namespace: ns, Name: name}
	}
	r, err := rbacgen.Generate(m, ro)
	if err != nil {
		return nil, err
	}
	return r.YAML()
}

// parseInterleaved parses fs from args where flags and positional
// arguments may be interleaved (`operator rbac m.wasm --crds dir`), and
// returns the positional arguments in order. After "--", everything is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
