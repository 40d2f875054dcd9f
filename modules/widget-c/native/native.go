// Package native runs the C widget's logic (widget.c, here so that cgo
// compiles it and rebuilds it when it changes) natively, for the native
// side of BenchmarkCGuestVsNative. The wasm build compiles the same file
// with ../wasm.c.
package native

/*
#cgo CFLAGS: -O2 -Wall -Wextra -Werror
#include <stddef.h>
size_t widget_reconcile(const char *req, size_t len, char *buf, size_t cap);
*/
import "C"

import "unsafe"

// Reconcile passes request to widget_reconcile and returns the response,
// reusing buf when it is large enough.
func Reconcile(request, buf []byte) []byte {
	if len(request) == 0 {
		request = []byte{' '}
	}
	for {
		var out *C.char
		if cap(buf) > 0 {
			out = (*C.char)(unsafe.Pointer(&buf[:1][0]))
		}
		n := int(C.widget_reconcile((*C.char)(unsafe.Pointer(&request[0])), C.size_t(len(request)), out, C.size_t(cap(buf))))
		if n <= cap(buf) {
			return buf[:n]
		}
		buf = make([]byte, 0, n)
	}
}
