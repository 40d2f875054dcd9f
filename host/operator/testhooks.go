package operator

import (
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/testhooks"
)

func init() {
	testhooks.ModuleStatus = func(host any, name string) (supervisor.Status, bool) {
		return host.(*Host).supervisor.Status(name)
	}
}
