// Package sdkarchive packs the guest SDK's source into a zip archive that
// the operator binary carries, and unpacks it into a new module's
// directory, so that `operator init` works with nothing but the binary:
// the SDK's module path is served by no module proxy.
//
// The archive holds what a module builds and tests against: every file of
// the guest-sdk directory except tests (*_test.go), test data (testdata/),
// build output (target/) and dot files. It is deterministic: the same tree
// gives the same bytes, so its digest names the SDK it holds.
package sdkarchive

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Limits on what Extract accepts. The archive is the one the binary was
// built with, but a corrupt or foreign one must not fill the disk.
const (
	maxFiles     = 1000
	maxFileBytes = 4 << 20
	maxBytes     = 32 << 20
)

// Files returns the files of the SDK rooted at root that the archive
// carries, as slash-separated paths relative to root, sorted.
func Files(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if name == "testdata" || name == "target" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("sdkarchive: no files under %s", root)
	}
	sort.Strings(files)
	return files, nil
}

// Pack writes the archive of the SDK rooted at root to w. Entries carry
// no time and mode 0644, so the bytes depend only on the files' paths and
// contents.
func Pack(w io.Writer, root string) error {
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("sdkarchive: %s is not the guest SDK: %w", root, err)
	}
	files, err := Files(root)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(w)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: f, Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)}
		h.SetMode(0o644)
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := fw.Write(b); err != nil {
			return err
		}
	}
	return zw.Close()
}

// Digest is the hex sha256 of an archive, which names the SDK it holds.
func Digest(archive []byte) string {
	sum := sha256.Sum256(archive)
	return hex.EncodeToString(sum[:])
}

// Extract unpacks archive into dir, which it creates; it refuses entries
// that would land outside dir, and archives past its limits (1,000 files,
// 4 MiB a file, 32 MiB in all).
func Extract(archive []byte, dir string) error {
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return fmt.Errorf("sdkarchive: the SDK archive is not a zip: %w", err)
	}
	if len(zr.File) > maxFiles {
		return fmt.Errorf("sdkarchive: the SDK archive holds %d files, more than %d", len(zr.File), maxFiles)
	}
	total := int64(0)
	for _, f := range zr.File {
		name := f.Name
		if name == "" || path.IsAbs(name) || strings.Contains(name, `\`) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("sdkarchive: the SDK archive has an entry outside its root: %q", name)
		}
		if strings.HasSuffix(name, "/") {
			continue
		}
		if f.UncompressedSize64 > maxFileBytes {
			return fmt.Errorf("sdkarchive: %s in the SDK archive is %d bytes, more than %d", name, f.UncompressedSize64, maxFileBytes)
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("sdkarchive: %s: %w", name, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, maxFileBytes+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("sdkarchive: %s: %w", name, err)
		}
		if total += int64(len(b)); len(b) > maxFileBytes || total > maxBytes {
			return errors.New("sdkarchive: the SDK archive unpacks to more than its limits")
		}
		out := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
