package engine

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// leaseTTL is how long a killed run's lease keeps a new run of the same
// task from another host waiting; the holder renews it every quarter of it.
const leaseTTL = 10 * time.Second

// ErrTaskRunning is returned when another run of the task (ferry run,
// ferry cutover or a worker) holds it.
var ErrTaskRunning = checkpoint.ErrTaskRunning

// holdLease takes the task's lease (the shard's, for a worker running one
// shard) and keeps it renewed until the returned func is called; a run
// that loses it to another has ctx's cause set and stops.
func (e *Engine) holdLease(ctx context.Context, cancel context.CancelCauseFunc) (func(), error) {
	name := os.Getenv(workerapi.EnvPodName)
	if name == "" {
		name, _ = os.Hostname()
	}
	l, err := e.store.AcquireLease(ctx, checkpoint.LeaseOptions{Key: e.opts.Shard, TTL: leaseTTL,
		Holder: checkpoint.Holder{Name: name, PID: os.Getpid()}, Dead: processGone,
		Waiting: func(h checkpoint.Holder) {
			e.log.Info("another run holds the task's lease: waiting to see whether it renews it (this run stops if it does; a killed run's lease is taken once unrenewed for the wait)",
				"holder", h.Name, "pid", h.PID, "wait", leaseTTL)
		}})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(leaseTTL / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := l.Renew(ctx); errors.Is(err, checkpoint.ErrTaskRunning) {
					cancel(err)
					return
				} else if err != nil {
					e.log.Warn("lease not renewed; retrying", "err", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		_ = l.Release(context.WithoutCancel(ctx))
	}, nil
}

// takeLease takes the task's lease for the rest of the run (once; a no-op
// outside runLeased).
func (e *Engine) takeLease() error {
	if e.leaseTaker == nil {
		return nil
	}
	return e.leaseTaker()
}

// processGone reports whether a holder with this host's name no longer
// runs here: a killed run, or the previous container of a restarted pod
// (whose process id this one may reuse).
func processGone(h checkpoint.Holder) bool {
	if h.PID == os.Getpid() || h.PID <= 0 {
		return true
	}
	err := syscall.Kill(h.PID, 0)
	return errors.Is(err, syscall.ESRCH)
}

// runLeased runs the task holding its lease, so that a second run of it
// (ferry run beside ferry cutover, two workers) stops at the start. The
// lease is taken by takeLease just before the run's first write to the
// target: a task refused by the checks before it (a lost oplog window, a
// non-empty target, bad input) leaves the target untouched.
func (e *Engine) runLeased(ctx context.Context) error {
	lctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	var release func()
	e.leaseTaker = func() error {
		if release != nil {
			return nil
		}
		r, err := e.holdLease(lctx, lost)
		if err != nil {
			return err
		}
		release = r
		return nil
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	wctx, stopWindows := context.WithCancel(lctx)
	go e.watchWindows(wctx)
	err := e.run(lctx)
	stopWindows()
	if cause := context.Cause(lctx); err != nil && errors.Is(cause, ErrTaskRunning) {
		return cause
	}
	return err
}
