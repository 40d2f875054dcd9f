//go:build !linux

package testregistry

import "syscall"

// sysProcAttr puts a child in a process group of its own. Only Linux has a
// parent-death signal: elsewhere a killed parent leaves the child running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
