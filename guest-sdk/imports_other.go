//go:build !wasip1

package guest

import (
	"sync"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

var (
	logMu    sync.Mutex
	logLines []LogLine
)

// hostLog records log lines when the module runs natively, so that unit tests
// of handler logic can assert on them with TakeLogs.
func hostLog(level abi.LogLevel, msg string) {
	logMu.Lock()
	defer logMu.Unlock()
	logLines = append(logLines, LogLine{Level: level, Message: msg})
}

// TakeLogs returns and clears the lines logged since the last call.
func TakeLogs() []LogLine {
	logMu.Lock()
	defer logMu.Unlock()
	l := logLines
	logLines = nil
	return l
}
