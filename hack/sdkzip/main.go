// Command sdkzip writes the guest SDK's source as the zip archive the
// operator binary carries (package internal/sdkarchive), for `operator
// init` outside a checkout. The Makefile runs it before building the
// operator:
//
//	go run ./hack/sdkzip -o cmd/operator/internal/scaffold/sdk/guest-sdk.zip guest-sdk
//
// It writes the file only when its bytes change, so make and go's build
// cache see no change for an unchanged SDK.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
	"github.com/wasmreconcile/wasmreconcile/internal/sdkarchive"
)

func main() {
	out := flag.String("o", "", "the archive to write (required)")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: sdkzip -o ARCHIVE GUEST-SDK-DIR")
		os.Exit(2)
	}
	var buf bytes.Buffer
	if err := sdkarchive.Pack(&buf, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "sdkzip:", err)
		os.Exit(1)
	}
	if old, err := os.ReadFile(*out); err == nil && bytes.Equal(old, buf.Bytes()) {
		return
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "sdkzip:", err)
		os.Exit(1)
	}
	if err := atomicfile.Write(*out, buf.Bytes()); err != nil {
		fmt.Fprintln(os.Stderr, "sdkzip:", err)
		os.Exit(1)
	}
	fmt.Printf("sdkzip: %s (%d bytes, sha256 %.16s)\n", *out, buf.Len(), sdkarchive.Digest(buf.Bytes()))
}
