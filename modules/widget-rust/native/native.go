//go:build rustnative

// Package native runs the Rust widget's logic (../widget.rs) natively,
// linked as a static library, for the native side of
// BenchmarkRustGuestVsNative. `make bench` builds the library
// (bin/rust/native/libwidget_rust.a, with Debian's rustc) and runs the
// benchmark with -tags rustnative; without the tag the package is empty, so
// that `go test ./...` needs no Rust toolchain.
package native

/*
#cgo LDFLAGS: ${SRCDIR}/../../../bin/rust/native/libwidget_rust.a -ldl -lpthread -lm
#include <stddef.h>
#include <stdint.h>
size_t widget_rust_reconcile(const uint8_t *req, size_t len, uint8_t *out, size_t cap);
*/
import "C"

import "unsafe"

// Reconcile passes request to widget_rust_reconcile and returns the
// response, reusing buf when it is large enough.
func Reconcile(request, buf []byte) []byte {
	if len(request) == 0 {
		request = []byte{' '}
	}
	for {
		var out *C.uint8_t
		if cap(buf) > 0 {
			out = (*C.uint8_t)(unsafe.Pointer(&buf[:1][0]))
		}
		n := int(C.widget_rust_reconcile((*C.uint8_t)(unsafe.Pointer(&request[0])), C.size_t(len(request)), out, C.size_t(cap(buf))))
		if n <= cap(buf) {
			return buf[:n]
		}
		buf = make([]byte, 0, n)
	}
}
