package operator

import "github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"

// ModuleStatus is the supervisor's status of module name, for the
// package's tests: its workqueue length and running reconciles.
func (h *Host) ModuleStatus(name string) (supervisor.Status, bool) {
	return h.supervisor.Status(name)
}
