// Package clientside holds host/operator's tests of sharding in the
// client-side mode across operator processes (docs/scaling.md): the chaos
// test, on a control plane of its own whose API server does not filter by
// shard (ShardedListAndWatch off, the default) and keeps the audit log the
// test checks. It has no code: see the _test.go files, and optest.
package clientside
