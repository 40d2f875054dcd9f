//go:build eager

package main

import guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"

// handle, in a build with -tags eager, decodes the whole request first, as
// guest.Handle does, before the same logic: the eager SDK path's
// allocations, for the host's soak test of the fuel clock (host/engine)
// and a build that differs from the default one (rollout tests). It is a
// build tag, not a variable, so that the default build links neither the
// eager decoder nor Lazy.
func handle(m guest.Manifest) {
	guest.Handle(m, func(req *guest.Request) *guest.Response {
		lazy, err := guest.Lazy(req)
		if err != nil {
			return guest.TerminalErrorf("widget: %v", err)
		}
		return Reconcile(lazy)
	})
}
