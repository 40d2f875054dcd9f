// Package testhooks lets host/operator's test packages under internal/
// see what they check of a running Host and nothing more: the supervisor's
// status of a module (its workqueue length, running reconciles and
// informer sync). Package operator sets the hooks when it is initialised;
// only tests read them, through optest.
package testhooks

import "github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"

// ModuleStatus returns the supervisor's status of module name in host, an
// *operator.Host (any, since package operator imports this one).
var ModuleStatus func(host any, name string) (supervisor.Status, bool)
