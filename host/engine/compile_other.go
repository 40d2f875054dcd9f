//go:build !linux

package engine

import (
	"os"
	"os/exec"
	"time"
)

// Elsewhere than Linux a worker is bounded by its Timeout only.
func configureWorker(*exec.Cmd)                              {}
func limitWorker(int, *CompileWorker) error                  { return nil }
func workerSignal(*os.ProcessState) string                   { return "" }
func workerCPUExceeded(*os.ProcessState, time.Duration) bool { return false }
