package instrument_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/wasm"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestWabinCannotReencodeV2Modules documents why the instrumenter uses only
// wabin's LEB128 codec and walks sections itself (RATIONALE.md, "Why does
// the instrumenter walk the binary itself?"): wabin's encoder panics on the
// passive and declarative element segments of WebAssembly 2.0
// ("TODO: support encoding for non-active elements"), so decoding a module
// with wabin and re-encoding it cannot work for valid modules. If a future
// wabin round-trips these modules, this test fails: reconsider then.
func TestWabinCannotReencodeV2Modules(t *testing.T) {
	root := testwasm.SpecRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "v2", "testdata", "elem.*.wasm"))
	if len(files) == 0 {
		t.Fatal("no elem.*.wasm in the v2 spec suite")
	}
	var panics, roundTrips int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := binary.DecodeModule(b, wasm.CoreFeaturesV2)
		if err != nil {
			continue // invalid or malformed on purpose
		}
		msg := func() (msg string) {
			defer func() {
				if r := recover(); r != nil {
					msg = fmt.Sprint(r)
				}
			}()
			binary.EncodeModule(m)
			return ""
		}()
		if strings.Contains(msg, "non-active elements") {
			panics++
		} else if msg == "" {
			roundTrips++
		}
	}
	t.Logf("wabin re-encoded %d element-section modules and panicked on %d", roundTrips, panics)
	if panics == 0 {
		t.Fatal("wabin re-encoded every element-section module of the v2 suite: its encoder may now be usable for the rewrite")
	}
}
