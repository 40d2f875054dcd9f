package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

// lifecycle runs module controllers: it starts one, builds it again every
// retry while one of its kinds is not served, starts it again with
// backoff when it stops with an error, and stops it when its context
// ends. It keeps no state of a controller: the caller keeps the cancel
// and the stopped channel start returns (running, under the supervisor's
// lock), so lifecycle needs no lock of its own.
type lifecycle struct {
	log        logr.Logger
	goroutines *sync.WaitGroup // every controller's goroutine is counted here
	// retry is the wait between builds while a kind is not served, and
	// the first wait before a stopped controller starts again (then
	// doubled up to maxBackoff). Defaults to reconciler.InformerRetry.
	retry time.Duration
	// maxBackoff bounds the wait between restarts. Defaults to 5 minutes.
	maxBackoff time.Duration
	// wait waits d or until ctx ends, and reports whether d passed; the
	// tests replace it to see the waits without sleeping. Defaults to a
	// timer.
	wait func(ctx context.Context, d time.Duration) bool
}

// starter is a built controller: controller-runtime's Controller.Start.
// Start blocks until ctx ends (nil) or the controller fails (an error:
// its kinds did not sync in its CacheSyncTimeout).
type starter interface {
	Start(ctx context.Context) error
}

// controllerRun is one controller for lifecycle.start.
type controllerRun struct {
	// module names the controller in logs.
	module string
	// build makes a new controller. An error meta.IsNoMatchError accepts
	// means one of its kinds is not served (a CRD not installed yet): it
	// is reported to unserved and built again after retry. Any other
	// error gives up.
	build func() (starter, error)
	// unserved reports a "no match" build error and the attempt (1 for
	// the first).
	unserved func(err error, attempt int)
}

func (l *lifecycle) withDefaults() *lifecycle {
	if l.retry <= 0 {
		l.retry = reconciler.InformerRetry
	}
	if l.maxBackoff <= 0 {
		l.maxBackoff = 5 * time.Minute
	}
	if l.wait == nil {
		l.wait = func(ctx context.Context, d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
				return true
			}
		}
	}
	return l
}

// start builds c's controller and runs it under ctx in a goroutine
// counted by l.goroutines, until ctx ends or a build gives up. It returns
// the cancel that stops the controller and a channel closed once its
// goroutine has returned; both nil when the first build gives up (the
// error is logged; nothing runs).
func (l *lifecycle) start(ctx context.Context, c controllerRun) (context.CancelFunc, <-chan struct{}) {
	ctrl, err := c.build()
	if err != nil && !meta.IsNoMatchError(err) {
		l.log.Error(err, "controller not started", "module", c.module)
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	l.goroutines.Add(1)
	go func() {
		defer l.goroutines.Done()
		defer close(stopped)
		defer cancel() // a controller that fails to start releases its sources too
		if ctrl = l.untilServed(ctx, c, ctrl, err); ctrl != nil {
			l.run(ctx, c, ctrl)
		}
	}()
	return cancel, stopped
}

// untilServed returns ctrl, or, while err is a "no match" error, reports
// it and builds again every retry until a build succeeds; nil when ctx
// ends or a build gives up.
func (l *lifecycle) untilServed(ctx context.Context, c controllerRun, ctrl starter, err error) starter {
	for attempt := 1; err != nil; attempt++ {
		c.unserved(err, attempt)
		if !l.wait(ctx, l.retry) {
			return nil
		}
		if ctrl, err = c.build(); err != nil && !meta.IsNoMatchError(err) {
			l.log.Error(err, "controller not started", "module", c.module)
			return nil
		}
	}
	return ctrl
}

// run starts ctrl until ctx ends. A controller that stops with an error
// (its kinds did not sync: the operator may not list one) is built and
// started again after a backoff that doubles from retry up to maxBackoff,
// until it is replaced or removed (ctx) or a build fails.
func (l *lifecycle) run(ctx context.Context, c controllerRun, ctrl starter) {
	backoff := l.retry
	for {
		err := ctrl.Start(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Error(err, "module controller stopped; starting it again", "module", c.module, "after", backoff.String())
		if !l.wait(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, l.maxBackoff)
		var berr error
		if ctrl, berr = c.build(); berr != nil {
			l.log.Error(berr, "controller not started", "module", c.module)
			return
		}
	}
}
