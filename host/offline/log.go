package offline

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// NewLogger returns a logger for Options.Log that writes each line to w,
// debug lines included, as
//
//	PREFIXguest: LEVEL: message key=value …
//
// where LEVEL is debug (V(1) and above), info, warn (the engine logs a
// guest's warnings as info lines with "guestLevel"="warn") or error. It is safe
// for concurrent use.
func NewLogger(w io.Writer, prefix string) logr.Logger {
	return logr.New(&writerSink{out: &lockedWriter{w: w}, prefix: prefix})
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s)
}

// writerSink is a logr.LogSink of plain lines; WithName and WithValues
// return copies.
type writerSink struct {
	out    *lockedWriter
	prefix string
	name   string
	values []any
}

func (s *writerSink) Init(logr.RuntimeInfo) {}

func (s *writerSink) Enabled(level int) bool { return true }

func (s *writerSink) Info(level int, msg string, kv ...any) {
	lvl := "info"
	if level > 0 {
		lvl = "debug"
	}
	var rest []any
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "guestLevel" {
			lvl = fmt.Sprint(kv[i+1])
			continue
		}
		rest = append(rest, kv[i], kv[i+1])
	}
	s.write(lvl, msg, rest)
}

func (s *writerSink) Error(err error, msg string, kv ...any) {
	if err != nil {
		kv = append(kv, "error", err.Error())
	}
	s.write("error", msg, kv)
}

func (s *writerSink) write(level, msg string, kv []any) {
	var b strings.Builder
	b.WriteString(s.prefix)
	if s.name != "" {
		b.WriteString(s.name + ": ")
	}
	b.WriteString(level + ": " + msg)
	all := append(append([]any{}, s.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%v", all[i], all[i+1])
	}
	b.WriteByte('\n')
	s.out.line(b.String())
}

func (s *writerSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any{}, s.values...), kv...)
	return &c
}

func (s *writerSink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "/" + name
	}
	c.name = name
	return &c
}
