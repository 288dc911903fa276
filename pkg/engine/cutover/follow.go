package cutover

import (
	"context"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"time"
)

// Follow is how a worker that does not move the step learns it: it reads
// the cut-over's record. A failure recorded there ends it with the
// failure (followedFailure), whether or not it saw the attempt's earlier
// steps (a worker may start, or read the record, after them), except the
// failure that stood when the worker started: that is an earlier
// attempt's, and the worker moving the step starts a new one for the
// request, as a run started over a failed cut-over does (Load).
func (m *Machine) Follow(ctx context.Context) error {
	rec, err := m.store.Task(ctx)
	if err != nil {
		return err
	}
	c := rec.Cutover
	if c == nil || (c.Step != workerapi.CutoverComplete && !m.opts.Requested) {
		return nil
	}
	m.mu.Lock()
	if c.Step == workerapi.CutoverFailed && c.StartedAt.Equal(m.staleFailure) {
		m.mu.Unlock()
		return nil
	}
	prev := m.co
	cp := *c
	m.co = &cp
	m.mu.Unlock()
	if prev == nil || prev.Step != c.Step || !prev.StartedAt.Equal(c.StartedAt) {
		m.log.Info("cut-over", "step", c.Step, "caughtUp", c.CaughtUp, "writesBlocked", c.WritesBlocked)
		if m.onStep != nil {
			m.onStep(c.Step)
		}
	}
	if c.Step == workerapi.CutoverFailed {
		return m.followedFailure(cp)
	}
	return nil
}

// NoteStaleFailure remembers the failed attempt recorded when a worker
// following the cut-over starts (see Follow). A task not recorded yet
// has none.
func (m *Machine) NoteStaleFailure(ctx context.Context) {
	rec, err := m.store.Task(ctx)
	if err != nil || rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverFailed {
		return
	}
	m.mu.Lock()
	m.staleFailure = rec.Cutover.StartedAt
	m.mu.Unlock()
}

// followedFailure is the error a worker following the cut-over ends with
// once Failed is recorded: the message of the worker that moved the step
// (Fail's: the step and why) and its exit code, so that every worker of
// the task ends alike: ErrFailed, with the verification's sentinel when
// the verification found differences.
func (m *Machine) followedFailure(c checkpoint.CutoverRecord) error {
	f := &recordedFailure{msg: fmt.Sprintf("%v, step %s", ErrFailed, c.Message), errs: []error{ErrFailed}}
	if c.Verify != nil && !c.Verify.OK && m.errVerify != nil {
		f.errs = append(f.errs, m.errVerify)
	}
	return f
}

// recordedFailure is a failure read from the records: msg as recorded,
// errs the sentinels it stands for.
type recordedFailure struct {
	msg  string
	errs []error
}

func (f *recordedFailure) Error() string   { return f.msg }
func (f *recordedFailure) Unwrap() []error { return f.errs }

// Await keeps a worker whose shard is drained until the worker moving
// the step records Complete (nil) or a failure.
func (m *Machine) Await(ctx context.Context) error {
	for m.Step() != workerapi.CutoverComplete {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(Poll):
		}
		if err := m.Follow(ctx); err != nil {
			return err
		}
	}
	return nil
}
