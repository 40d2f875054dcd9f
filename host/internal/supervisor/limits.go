package supervisor

import (
	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// mergeLimits returns base with the non-zero fields of override.
func mergeLimits(base, override engine.Limits) engine.Limits {
	if override.Fuel != 0 {
		base.Fuel = override.Fuel
	}
	if override.InitFuel != 0 {
		base.InitFuel = override.InitFuel
	}
	if override.Timeout != 0 {
		base.Timeout = override.Timeout
	}
	if override.InitTimeout != 0 {
		base.InitTimeout = override.InitTimeout
	}
	if override.MemoryLimitPages != 0 {
		base.MemoryLimitPages = override.MemoryLimitPages
	}
	if override.MaxRequestBytes != 0 {
		base.MaxRequestBytes = override.MaxRequestBytes
	}
	if override.MaxResponseBytes != 0 {
		base.MaxResponseBytes = override.MaxResponseBytes
	}
	if override.MaxInstances != 0 {
		base.MaxInstances = override.MaxInstances
	}
	if override.FreshInstancePerCall {
		base.FreshInstancePerCall = true
	}
	if override.MaxLogLines != 0 {
		base.MaxLogLines = override.MaxLogLines
	}
	if override.MaxLogBytes != 0 {
		base.MaxLogBytes = override.MaxLogBytes
	}
	if override.MaxTableElements != 0 {
		base.MaxTableElements = override.MaxTableElements
	}
	if override.MaxCallDepth != 0 {
		base.MaxCallDepth = override.MaxCallDepth
	}
	if override.RecycleAfterCalls != 0 {
		base.RecycleAfterCalls = override.RecycleAfterCalls
	}
	if override.RecycleMemoryPages != 0 {
		base.RecycleMemoryPages = override.RecycleMemoryPages
	}
	if override.IdleInstanceTimeout != 0 {
		base.IdleInstanceTimeout = override.IdleInstanceTimeout
	}
	return base
}
