// Package testhooks lets host/operator's test packages under internal/
// see what they check of a running Host and nothing more: the supervisor's
// status of a module (its workqueue length, running reconciles and
// informer sync). Package operator sets the hooks when it is initialised;
// only tests read them, through optest.
package testhooks

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
)

// ModuleStatus returns the supervisor's status of module name in host, an
// *operator.Host (any, since package operator imports this one).
var ModuleStatus func(host any, name string) (supervisor.Status, bool)

// ShardActive returns the slots host, an *operator.Host, works on, and
// false when it does not shard.
var ShardActive func(host any) ([]int, bool)

// ShardAdmitted makes host, a sharding *operator.Host, call f with the key
// of every reconcile it admits.
var ShardAdmitted func(host any, f func(types.NamespacedName))

// ShardRefused makes host, a sharding *operator.Host, call f with the key
// of every reconcile its gate refuses (one that reached the queue although
// another replica runs its slot).
var ShardRefused func(host any, f func(types.NamespacedName))

// ShardReport is the sharding line of host's /readyz/modules ("" when it
// does not shard): its mode and assignment.
var ShardReport func(host any) string
