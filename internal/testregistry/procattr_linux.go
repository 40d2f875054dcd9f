package testregistry

import "syscall"

// sysProcAttr puts a child in a process group of its own (a Ctrl-C in the
// terminal reaches only this process, which stops the child in order) and
// has it killed when this process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
