package engine

import (
	"context"
	"errors"
	"log/slog"
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

// lease is the task's lease in the task's checkpoint store (the shard's,
// for a worker running one shard), held over a run (run) so that a second
// run of the task stops at the start.
type lease struct {
	store *checkpoint.Store
	// key is the shard of a worker running one shard; "" for the task.
	key string
	log *slog.Logger
	// taker takes the task's lease (set by run; see take).
	taker func() error
}

// hold takes the task's lease (the shard's, for a worker running one
// shard) and keeps it renewed until the returned func is called; a run
// that loses it to another has ctx's cause set and stops.
func (l *lease) hold(ctx context.Context, cancel context.CancelCauseFunc) (func(), error) {
	name := os.Getenv(workerapi.EnvPodName)
	if name == "" {
		name, _ = os.Hostname()
	}
	held, err := l.store.AcquireLease(ctx, checkpoint.LeaseOptions{Key: l.key, TTL: leaseTTL,
		Holder: checkpoint.Holder{Name: name, PID: os.Getpid()}, Dead: processGone,
		Waiting: func(h checkpoint.Holder) {
			l.log.Info("another run holds the task's lease: waiting to see whether it renews it (this run stops if it does; a killed run's lease is taken once unrenewed for the wait)",
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
				if err := held.Renew(ctx); errors.Is(err, checkpoint.ErrTaskRunning) {
					cancel(err)
					return
				} else if err != nil {
					l.log.Warn("lease not renewed; retrying", "err", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		_ = held.Release(context.WithoutCancel(ctx))
	}, nil
}

// take takes the task's lease for the rest of the run (once; a no-op
// outside run).
func (l *lease) take() error {
	if l.taker == nil {
		return nil
	}
	return l.taker()
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

// run runs the task (f) holding its lease, so that a second run of it
// (ferry run beside ferry cutover, two workers) stops at the start. The
// lease is taken by take just before the run's first write to the
// target: a task refused by the checks before it (a lost oplog window, a
// non-empty target, bad input) leaves the target untouched. f's context
// ends when another run takes the lease.
func (l *lease) run(ctx context.Context, f func(context.Context) error) error {
	lctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	var release func()
	l.taker = func() error {
		if release != nil {
			return nil
		}
		r, err := l.hold(lctx, lost)
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
	err := f(lctx)
	if cause := context.Cause(lctx); err != nil && errors.Is(cause, ErrTaskRunning) {
		return cause
	}
	return err
}
