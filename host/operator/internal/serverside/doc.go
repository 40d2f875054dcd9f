// Package serverside holds host/operator's tests of sharding in the
// server-side mode (docs/scaling.md): they need kube-apiserver's
// ShardedListAndWatch feature gate, so they run on a control plane of
// their own with the gate on. It has no code: see the _test.go files, and
// optest for what the operator's test packages share.
package serverside
