package operator

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/testhooks"
)

func init() {
	testhooks.ModuleStatus = func(host any, name string) (supervisor.Status, bool) {
		return host.(*Host).supervisor.Status(name)
	}
	testhooks.ShardActive = func(host any) ([]int, bool) {
		h := host.(*Host)
		if h.shards == nil {
			return nil, false
		}
		return h.shards.coord.Active(), true
	}
	testhooks.ShardReport = func(host any) string {
		h := host.(*Host)
		if h.shards == nil {
			return ""
		}
		return h.shards.report()
	}
	testhooks.ShardAdmitted = func(host any, f func(types.NamespacedName)) {
		host.(*Host).shards.admitted.Store(&f)
	}
	testhooks.ShardRefused = func(host any, f func(types.NamespacedName)) {
		host.(*Host).shards.refused.Store(&f)
	}
}
