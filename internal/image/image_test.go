package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/wasmreconcile/wasmreconcile/internal/testregistry"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
)

// TestImagePushedRunsVersion builds the operator statically, builds its
// image, pushes it to a real registry (the CNCF distribution registry on
// loopback), pulls it back by digest, unpacks its filesystem and runs its
// entrypoint with `version`: as root, inside the unpacked filesystem
// (chroot) as the image's user, so the binary can use nothing of this
// machine's.
func TestImagePushedRunsVersion(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is a Linux image")
	}
	bin, err := testshare.GoBinary("operator-run", "./cmd/operator", "", "runonly") // static and the run build, as make image builds it
	if err != nil {
		t.Fatalf("building the operator: %v", err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(b, Options{Arch: runtime.GOARCH, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Build(b, Options{Arch: runtime.GOARCH, Version: "test"})
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of one binary: digests %s and %s, want one", d1, d2)
	}

	reg, err := testregistry.Start(testregistry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	tag, err := name.NewTag(reg.Host+"/wasmreconcile/operator:test", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(tag.Context().Digest(d1.String()))
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := pulled.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Config.User != User ||
		strings.Join(cf.Config.Entrypoint, " ") != "/operator" || strings.Join(cf.Config.Cmd, " ") != "run --reconcile-modules" {
		t.Fatalf("config %+v", cf)
	}

	root := t.TempDir()
	if err := unpack(mutate.Extract(pulled), root); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, cf.Config.Entrypoint[0]), "version")
	cmd.Env = cf.Config.Env
	if os.Geteuid() == 0 {
		// Inside the image's filesystem, as its user.
		cmd.Path = cf.Config.Entrypoint[0]
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		cmd.Dir = "/"
	} else {
		t.Log("not root: the entrypoint runs from the unpacked filesystem, not chrooted into it")
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "wasmreconcile operator") {
		t.Fatalf("the image's entrypoint with `version`: %v, output %q", err, out)
	}
	t.Logf("image %s (%d MB binary) runs: %s", d1, len(b)>>20, strings.TrimSpace(string(out)))
}

func TestBuildRefusesNonELF(t *testing.T) {
	if _, err := Build([]byte("#!/bin/sh\n"), Options{}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("got %v", err)
	}
}

// unpack writes a flattened image filesystem into dir.
func unpack(rc io.ReadCloser, dir string) error {
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
				return err
			}
			_ = os.Lchown(p, h.Uid, h.Gid)
		case tar.TypeReg:
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, tr); err != nil {
				return err
			}
			if err := os.WriteFile(p, buf.Bytes(), os.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		}
	}
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
