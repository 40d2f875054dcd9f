// Package native holds the native side of BenchmarkRustGuestVsNative,
// built with -tags rustnative (see native.go).
package native
