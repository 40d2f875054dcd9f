//go:build !runonly

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
)

const pushUsage = `Usage: operator push [--registry-config FILE] MODULE.wasm oci://REGISTRY/REPOSITORY:TAG

Pushes a reconcile module to an OCI registry in the wasm artifact layout
(config application/vnd.wasm.config.v0+json, one layer
application/vnd.wasm.content.layer.v1+wasm) and prints the reference pinned
by the manifest's digest, for a ReconcileModule's spec.source.oci.ref or
--module:

  oci://REGISTRY/REPOSITORY:TAG@sha256:DIGEST

The module is loaded first (offline, on the interpreter; only its manifest
runs): a file that is not a reconcile module is refused before anything is
sent. The same bytes always push to the same digest. Loopback and private
registries are spoken to over plain http when they have no TLS.

Flags:
`

const pullUsage = `Usage: operator pull [--registry-config FILE] [-o FILE.wasm] oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]

Fetches a module from an OCI registry, checks it against the manifest's
digest, writes it to -o and prints its pinned reference and the module's
sha256. A reference with only a tag is resolved to the digest the tag names
now; the printed reference pins that digest.

Flags:
`

// registryFlags are the flags push and pull share.
type registryFlags struct {
	config  string
	timeout time.Duration
}

func (r *registryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.config, "registry-config", "", `Docker config file ({"auths": ...}) with the registry's credentials, as docker login writes it; credential helpers it names are never run (default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json, when it exists; else anonymous)`)
	fs.DurationVar(&r.timeout, "timeout", 2*time.Minute, "timeout of the whole push or pull")
}

// credentials are the registry credentials of the flags, or nil for
// anonymous access.
func (r *registryFlags) credentials() source.Credentials {
	if r.config != "" {
		return source.DockerConfigFile(r.config)
	}
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".docker")
		}
	}
	if dir == "" {
		return nil
	}
	if p := filepath.Join(dir, "config.json"); fileExists(p) {
		return source.DockerConfigFile(p)
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// cliSourceOptions is the policy of push and pull: the person running the
// command chose the registry, so loopback and private addresses are
// allowed (link-local ones, such as a cloud's metadata service, stay
// refused), unlike the operator's own fetches.
func cliSourceOptions() source.Options {
	return source.Options{URL: source.URLPolicy{AllowPrivate: true}}
}

func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pushUsage); fs.PrintDefaults() }
	var reg registryFlags
	reg.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 2 {
		return errors.New("operator push: want MODULE.wasm and oci://REGISTRY/REPOSITORY:TAG; see operator push --help")
	}
	file, ref := pos[0], pos[1]
	if !strings.HasPrefix(ref, source.OCIScheme) {
		return fmt.Errorf("operator push: %q is not an oci:// reference; write oci://REGISTRY/REPOSITORY:TAG", ref)
	}
	parsed, err := source.ParseOCIRef(ref)
	if err != nil {
		return err
	}
	if parsed.Tag == "" && parsed.Digest == "" {
		return fmt.Errorf("operator push: %s names no tag; add one (oci://%s:v1) so that people can find the module again", ref, parsed.Repository)
	}
	wasm, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	ctx := context.Background()
	m, err := readManifest(ctx, file)
	if err != nil {
		return fmt.Errorf("operator push: %w; push only a reconcile module (built with -buildmode=c-shared for wasip1)", err)
	}
	pushed, err := source.Push(ctx, ref, wasm, m.Name+".wasm", reg.credentials(), reg.timeout, cliSourceOptions())
	if err != nil {
		return err
	}
	sum := sha256.Sum256(wasm)
	fmt.Fprintf(stderr, "pushed module %s (%d bytes, sha256:%s) to %s\n", m.Name, len(wasm), hex.EncodeToString(sum[:]), parsed.Registry())
	fmt.Fprintln(stdout, pushed.String())
	return nil
}

func runPull(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pull", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pullUsage); fs.PrintDefaults() }
	var reg registryFlags
	reg.register(fs)
	out := fs.String("o", "", "file to write the module to (default: the repository's last path segment and .wasm, in the current directory); - is standard output")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 {
		return errors.New("operator pull: want one reference, oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]; see operator pull --help")
	}
	ref := pos[0]
	if !strings.HasPrefix(ref, source.OCIScheme) {
		return fmt.Errorf("operator pull: %q is not an oci:// reference; write oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]", ref)
	}
	ctx := context.Background()
	creds, opts := reg.credentials(), cliSourceOptions()
	resolved, err := source.Resolve(ctx, ref, creds, reg.timeout, opts)
	if err != nil {
		return err
	}
	wasm, err := source.OCI(resolved.String(), creds, reg.timeout, opts).Fetch(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(wasm)
	dest := *out
	if dest == "" {
		dest = path.Base(resolved.Repository) + ".wasm"
	}
	if dest == "-" {
		if _, err := stdout.Write(wasm); err != nil {
			return err
		}
	} else {
		if err := atomicfile.Write(dest, wasm); err != nil {
			return err
		}
		fmt.Fprintln(stdout, resolved.String())
	}
	fmt.Fprintf(stderr, "pulled %d bytes (sha256:%s) to %s\n", len(wasm), hex.EncodeToString(sum[:]), dest)
	return nil
}
