// Package gatetest tests package shard against a kube-apiserver of its own
// with the ShardedListAndWatch feature gate on (KEP-5866): that the API
// server applies the selectors package shard writes, in lists and watches,
// exactly as package shard places objects. It has only tests.
package gatetest
