//go:build !eager

package main

import guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"

// handle registers Reconcile with HandleLazy: the handler reads four fields
// of a 2.4 KB request, and the SDK's scanner skips the rest without
// decoding it.
func handle(m guest.Manifest) { guest.HandleLazy(m, Reconcile) }
