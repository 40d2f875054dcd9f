package guest

import (
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/format"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// Debugf logs at debug level through the host's logger. The Xf functions
// format with Sprintf.
func Debugf(format string, args ...any) { logf(abi.LogLevelDebug, format, args...) }

// Infof logs at info level through the host's logger.
func Infof(format string, args ...any) { logf(abi.LogLevelInfo, format, args...) }

// Warnf logs at warning level through the host's logger.
func Warnf(format string, args ...any) { logf(abi.LogLevelWarn, format, args...) }

// Errorlogf logs at error level through the host's logger.
func Errorlogf(format string, args ...any) { logf(abi.LogLevelError, format, args...) }

func logf(level abi.LogLevel, format string, args ...any) {
	hostLog(level, Sprintf(format, args...))
}

// Debug logs msg at debug level with key/value pairs, as logr's and slog's
// loggers take them: Debug("applied", "child", name, "replicas", 3) logs
// `applied child="web" replicas=3`. Each value is written as JSON: strings
// quoted, numbers, booleans, maps and slices as they encode in a response,
// an error or a Stringer as the string of its text; a value of another type
// as (its type). A key that is not a string, or a key with no value, is
// written as such, never dropped. Unlike the f functions, these do not link
// Sprintf into the module.
func Debug(msg string, keysAndValues ...any) { logKV(abi.LogLevelDebug, msg, keysAndValues) }

// Info logs at info level; see Debug.
func Info(msg string, keysAndValues ...any) { logKV(abi.LogLevelInfo, msg, keysAndValues) }

// Warn logs at warning level; see Debug.
func Warn(msg string, keysAndValues ...any) { logKV(abi.LogLevelWarn, msg, keysAndValues) }

// Errorlog logs at error level; see Debug.
func Errorlog(msg string, keysAndValues ...any) { logKV(abi.LogLevelError, msg, keysAndValues) }

func logKV(level abi.LogLevel, msg string, kv []any) {
	if len(kv) == 0 {
		hostLog(level, msg)
		return
	}
	hostLog(level, string(appendKV([]byte(msg), kv)))
}

// appendKV appends ` key=value` for each pair of kv.
func appendKV(b []byte, kv []any) []byte {
	for i := 0; i < len(kv); i += 2 {
		b = append(b, ' ')
		if k, ok := kv[i].(string); ok {
			b = append(b, k...)
		} else {
			b = append(b, "(key "...)
			b = appendLogValue(b, kv[i])
			b = append(b, ')')
		}
		b = append(b, '=')
		if i+1 == len(kv) {
			b = append(b, "(missing)"...)
			break
		}
		b = appendLogValue(b, kv[i+1])
	}
	return b
}

func appendLogValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case error:
		return jsontree.AppendString(b, x.Error())
	case format.Stringer:
		return jsontree.AppendString(b, x.String())
	}
	out, err := jsontree.Append(b, v)
	if err != nil {
		return append(append(append(b, '('), format.TypeName(v)...), ')')
	}
	return out
}

// LogLine is one line a handler logged while running natively (in unit tests).
type LogLine struct {
	Level   abi.LogLevel
	Message string
}
