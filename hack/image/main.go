// Command image builds the operator's container image without Docker
// (internal/image) from a static operator binary, and pushes it to a
// registry or writes it as an OCI image layout:
//
//	CGO_ENABLED=0 go build -trimpath -o bin/operator-static ./cmd/operator
//	go run ./hack/image --binary bin/operator-static --push oci://REGISTRY/REPOSITORY:TAG
//	go run ./hack/image --binary bin/operator-static --layout bin/image
//
// `make image` runs it. Credentials come from ~/.docker/config.json (or
// $DOCKER_CONFIG), as docker login writes them.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/wasmreconcile/wasmreconcile/internal/image"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "bin/operator-static", "the static operator binary (CGO_ENABLED=0 go build ./cmd/operator)")
	push := flag.String("push", "", "push the image to this reference, oci://REGISTRY/REPOSITORY:TAG")
	dir := flag.String("layout", "", "write the image as an OCI image layout into this directory")
	version := flag.String("version", "", "the org.opencontainers.image.version label")
	arch := flag.String("arch", runtime.GOARCH, "the binary's GOARCH")
	flag.Parse()
	if (*push == "") == (*dir == "") {
		return errors.New("give exactly one of --push oci://REGISTRY/REPOSITORY:TAG and --layout DIR")
	}
	b, err := os.ReadFile(*binary)
	if err != nil {
		return fmt.Errorf("%w; build it with CGO_ENABLED=0 go build -trimpath -o %s ./cmd/operator", err, *binary)
	}
	img, err := image.Build(b, image.Options{Arch: *arch, Version: *version})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *dir != "" {
		p, err := layout.Write(*dir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img); err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", *dir, digest)
		return nil
	}
	ref, err := name.ParseReference(strings.TrimPrefix(*push, "oci://"), name.StrictValidation)
	if err != nil {
		return fmt.Errorf("--push %q: %w; write oci://REGISTRY/REPOSITORY:TAG", *push, err)
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	fmt.Printf("oci://%s@%s\n", ref.Name(), digest)
	return nil
}
