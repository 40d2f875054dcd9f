package engine

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// configureWorker makes a compile worker die with the host.
func configureWorker(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// limitWorker sets the kernel's limits of the worker pid: its data
// (RLIMIT_DATA: the Go heap and wazero's code buffers are private writable
// mappings), its CPU time (RLIMIT_CPU: soft and hard alike, so the kernel
// kills it at the limit), the size of a file it writes (RLIMIT_FSIZE: the
// compiled code), and a lower scheduling priority.
func limitWorker(pid int, w *CompileWorker) error {
	cpu := uint64((w.MaxCPU + time.Second - 1) / time.Second)
	for _, l := range []struct {
		resource int
		value    uint64
	}{
		{unix.RLIMIT_DATA, uint64(w.MaxMemory)},
		{unix.RLIMIT_CPU, cpu},
		{unix.RLIMIT_FSIZE, uint64(w.MaxCodeBytes)},
	} {
		if err := unix.Prlimit(pid, l.resource, &unix.Rlimit{Cur: l.value, Max: l.value}, nil); err != nil {
			return err
		}
	}
	_ = unix.Setpriority(unix.PRIO_PROCESS, pid, 10) // best effort: lowering a priority needs no privilege
	return nil
}

// workerSignal is the name of the signal that ended the worker, or "".
func workerSignal(st *os.ProcessState) string {
	if st == nil {
		return ""
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ""
	}
	return unix.SignalName(ws.Signal())
}

// workerCPUExceeded reports whether the worker was killed having used its
// CPU limit.
func workerCPUExceeded(st *os.ProcessState, limit time.Duration) bool {
	if st == nil {
		return false
	}
	sig := workerSignal(st)
	if sig != "SIGKILL" && sig != "SIGXCPU" {
		return false
	}
	return st.UserTime()+st.SystemTime() >= limit-time.Second
}
