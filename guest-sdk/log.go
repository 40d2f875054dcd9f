package guest

import (
	"fmt"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// Debugf logs at debug level through the host's logger.
func Debugf(format string, args ...any) { logf(abi.LogLevelDebug, format, args...) }

// Infof logs at info level through the host's logger.
func Infof(format string, args ...any) { logf(abi.LogLevelInfo, format, args...) }

// Warnf logs at warning level through the host's logger.
func Warnf(format string, args ...any) { logf(abi.LogLevelWarn, format, args...) }

// Errorlogf logs at error level through the host's logger.
func Errorlogf(format string, args ...any) { logf(abi.LogLevelError, format, args...) }

func logf(level abi.LogLevel, format string, args ...any) {
	hostLog(level, fmt.Sprintf(format, args...))
}

// LogLine is one line a handler logged while running natively (in unit tests).
type LogLine struct {
	Level   abi.LogLevel
	Message string
}
