// Package image builds the operator's container image without Docker: an
// OCI image of one layer holding the static operator binary, a passwd and
// group naming the non-root user it runs as, and /tmp, built with
// go-containerregistry. It is what the Dockerfile builds on distroless, less
// distroless's CA bundle and tzdata: the binary embeds Mozilla's roots
// (golang.org/x/crypto/x509roots/fallback) and needs no zone data.
//
// The same binary always gives the same image digest: every file has a
// fixed time and owner, and the config has no creation time.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options describe the image. Zero fields take the stated defaults.
type Options struct {
	// Arch is the binary's GOARCH. Defaults to "amd64".
	Arch string
	// Version is recorded as the org.opencontainers.image.version label.
	// Defaults to "": no label.
	Version string
	// Source is recorded as the org.opencontainers.image.source label.
	// Defaults to "https://github.com/wasmreconcile/wasmreconcile".
	Source string
}

// User is the user and group the image runs as: distroless's "nonroot".
const User = "65532:65532"

// Entrypoint is the image's entrypoint, and Cmd its default arguments, as
// in the Dockerfile.
var (
	Entrypoint = []string{"/operator"}
	Cmd        = []string{"run", "--reconcile-modules"}
)

// Build returns the image of binary, which must be a static Linux
// executable of the operator (CGO_ENABLED=0: the image has no libc).
func Build(binary []byte, opts Options) (v1.Image, error) {
	if !bytes.HasPrefix(binary, []byte("\x7fELF")) {
		return nil, fmt.Errorf("the operator binary is not a Linux executable (no ELF header); build it with GOOS=linux CGO_ENABLED=0 go build ./cmd/operator")
	}
	if opts.Arch == "" {
		opts.Arch = "amd64"
	}
	if opts.Source == "" {
		opts.Source = "https://github.com/wasmreconcile/wasmreconcile"
	}
	fs, err := rootfs(binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fs)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	labels := map[string]string{"org.opencontainers.image.source": opts.Source, "org.opencontainers.image.title": "wasmreconcile operator"}
	if opts.Version != "" {
		labels["org.opencontainers.image.version"] = opts.Version
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", opts.Arch
	cf.Config = v1.Config{
		Entrypoint: Entrypoint,
		Cmd:        Cmd,
		User:       User,
		WorkingDir: "/",
		Env:        []string{"HOME=/home/nonroot", "TMPDIR=/tmp"},
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer's tar: every entry owned by root but the home
// directory, at the Unix epoch.
func rootfs(binary []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: uid, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	for _, step := range []func() error{
		func() error { return dir("etc/", 0o755, 0) },
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")) },
		func() error { return dir("home/", 0o755, 0) },
		func() error { return dir("home/nonroot/", 0o700, 65532) },
		func() error { return dir("tmp/", 0o1777, 0) },
		func() error { return file("operator", 0o755, binary) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
