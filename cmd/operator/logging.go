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
	// Locked: the writer is shared by every logger of the process, and
	// only the first ctrl.SetLogger of a process takes effect.
	o.DestWriter = zapcore.Lock(zapcore.AddSync(w))
	log := zap.New(zap.UseFlagOptions(&o))
	return log.WithSink(quietProbes{LogSink: log.GetSink()})
}

// quietProbes drops controller-runtime's info line for each failed probe
// of /readyz or /healthz ("healthz check failed" with "statuses":[{}]): a
// kubelet probing an operator that waits for a CRD would log it every
// period, while the reason is logged once per episode (and
// controller-runtime's V(1) line for the probe, with the failing check's
// error, stays).
//
// It also defers WithValues until a line is written: controller-runtime
// and the reconciler add an object's key/values to a logger on every
// reconcile, and zap encodes them at once, which was 5% of the operator's
// CPU at 10,000 objects (docs/benchmarks.md) for lines that, at the default
// verbosity, are almost never written. The values keep their order with
// respect to names: WithName applies what is pending first.
type quietProbes struct {
	logr.LogSink
	name    string // the logger's name, as WithName built it
	pending []any  // key/values not yet given to LogSink
}

const probeLogger, probeFailed = "controller-runtime.healthz", "healthz check failed"

// sink is LogSink with the pending key/values.
func (q quietProbes) sink() logr.LogSink {
	if len(q.pending) == 0 {
		return q.LogSink
	}
	return q.LogSink.WithValues(q.pending...)
}

func (q quietProbes) Info(level int, msg string, kv ...any) {
	if level == 0 && msg == probeFailed && q.name == probeLogger {
		return
	}
	q.sink().Info(level, msg, kv...)
}

func (q quietProbes) Error(err error, msg string, kv ...any) {
	q.sink().Error(err, msg, kv...)
}

func (q quietProbes) WithName(name string) logr.LogSink {
	full := name
	if q.name != "" {
		full = q.name + "." + name
	}
	return quietProbes{LogSink: q.sink().WithName(name), name: full}
}

func (q quietProbes) WithValues(kv ...any) logr.LogSink {
	pending := make([]any, 0, len(q.pending)+len(kv))
	return quietProbes{LogSink: q.LogSink, name: q.name, pending: append(append(pending, q.pending...), kv...)}
}

func (q quietProbes) WithCallDepth(depth int) logr.LogSink {
	if c, ok := q.LogSink.(logr.CallDepthLogSink); ok {
		return quietProbes{LogSink: c.WithCallDepth(depth), name: q.name, pending: q.pending}
	}
	return q
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
