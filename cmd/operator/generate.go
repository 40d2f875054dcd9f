//go:build !runonly

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
	"github.com/wasmreconcile/wasmreconcile/internal/decodegen"
)

const generateUsage = `Usage: operator generate [--check] PACKAGE_DIR...

Writes PACKAGE_DIR/zz_generated.decode.go for each Go package directory
given: for every type of the package, a function DecodeT(v any, path
string) (T, error) that turns the object a module receives (guest.Request's
maps) into a T, with no reflection, on the guest SDK's package decode. A
scaffolded module's make manifests runs it on api/VERSION, beside
controller-gen, which writes the CRD from the same types:

  spec, err := v1alpha1.DecodeShopSpec(req.Object["spec"], "spec")

A field the types do not declare is a compile error in the module; a value
of the wrong JSON type is an error naming its path. Types it decodes:
string, bool, int, int32, int64, float64, any, the package's own types,
guest.Condition, and pointers, slices and map[string] of those.

--check writes nothing and fails when a file is missing or differs from
what it would write (for CI).

Flags:
`

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, generateUsage); fs.PrintDefaults() }
	check := fs.Bool("check", false, "write nothing; fail when a generated file is missing or out of date")
	dirs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(dirs) == 0 {
		return errors.New("operator generate: want one or more package directories, such as api/v1alpha1; see operator generate --help")
	}
	var stale []string
	for _, dir := range dirs {
		src, err := decodegen.Generate(dir)
		if err != nil {
			return fmt.Errorf("operator generate %s: %w", dir, err)
		}
		out := filepath.Join(dir, decodegen.FileName)
		old, err := os.ReadFile(out)
		if err == nil && bytes.Equal(old, src) {
			fmt.Fprintf(stdout, "%s: up to date\n", out)
			continue
		}
		if *check {
			stale = append(stale, out)
			continue
		}
		if err := atomicfile.Write(out, src); err != nil {
			return fmt.Errorf("operator generate: %w", err)
		}
		fmt.Fprintf(stdout, "%s: written\n", out)
	}
	if len(stale) > 0 {
		return fmt.Errorf("operator generate --check: %v missing or out of date; run operator generate (make manifests) and commit the result", stale)
	}
	return nil
}
