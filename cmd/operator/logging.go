package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logFlags are operator run's logging flags: controller-runtime's --zap-*
// flags and -v. The default is production logging: JSON lines, info and
// above, a stack trace only at error. --zap-devel opts in to development
// logging (console lines, debug and above, stack traces from warn).
type logFlags struct {
	zap zap.Options
}

func (l *logFlags) register(fs *flag.FlagSet) {
	l.zap.BindFlags(fs) // --zap-devel, --zap-encoder, --zap-log-level, --zap-stacktrace-level, --zap-time-encoding
	fs.Var(verbosity{&l.zap}, "v", "log verbosity: 0 is info; 1 adds debug lines (V(1): a START and a FINISH line per reconcile); the same as --zap-log-level=N")
}

// logger returns the logger the flags ask for, writing to w.
func (l *logFlags) logger(w io.Writer) logr.Logger {
	o := l.zap
	o.DestWriter = w
	return zap.New(zap.UseFlagOptions(&o))
}

// verbosity is -v: a logr verbosity, set as the zap level -N.
type verbosity struct{ o *zap.Options }

func (v verbosity) String() string {
	if v.o == nil || v.o.Level == nil {
		return "0"
	}
	if l, ok := v.o.Level.(uberzap.AtomicLevel); ok && l.Level() < zapcore.InfoLevel {
		return strconv.Itoa(-int(l.Level()))
	}
	return "0"
}

func (v verbosity) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 127 {
		return fmt.Errorf("want a verbosity from 0 to 127, got %q", s)
	}
	v.o.Level = uberzap.NewAtomicLevelAt(zapcore.Level(-n))
	return nil
}
