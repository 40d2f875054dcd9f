//go:build !wasip1

package guest

import (
	"sync"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// tapes are reused from call to call: a request's values are dead once its
// handler returns. Natively (unit tests), calls may run in parallel.
var tapes = sync.Pool{New: func() any { return &jsontree.Tape{} }}

func getTape() *jsontree.Tape { return tapes.Get().(*jsontree.Tape) }

func putTape(t *jsontree.Tape) { tapes.Put(t) }

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

// CacheReadFunc serves cache reads in native builds.
type CacheReadFunc func(abi.CacheRequest) (abi.CacheStatus, []byte)

var nativeCache CacheReadFunc

// SetCacheReader installs the cache that Get and List read in native builds
// (unit tests of handler logic); package sdktest installs one. nil restores
// the default, which answers every read with abi.CacheUnavailable.
func SetCacheReader(fn CacheReadFunc) {
	logMu.Lock()
	defer logMu.Unlock()
	nativeCache = fn
}

func cacheRead(req abi.CacheRequest) (abi.CacheStatus, []byte) {
	logMu.Lock()
	fn := nativeCache
	logMu.Unlock()
	if fn == nil {
		return abi.CacheUnavailable, []byte("no cache in a native build; use package sdktest")
	}
	return fn(req)
}
