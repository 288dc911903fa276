package engine

import (
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
)

// runState is the run's reported state: its phase, the error that
// stopped it, when it started and finished, and the source oplogs'
// windows, behind its own mutex. Status reads it through report.
type runState struct {
	mu       sync.Mutex
	phase    Phase
	err      error
	started  time.Time
	finished time.Time
	// windows are the source oplogs' windows, read by watchWindows.
	windows []OplogWindow
	// onPhase, when set, is told every phase the task enters, once the
	// checkpoint records it (tests).
	onPhase func(Phase)
}

// start notes when the run started.
func (r *runState) start() {
	r.mu.Lock()
	r.started = time.Now()
	r.mu.Unlock()
}

// end notes when the run ended and, when it failed (err set and not
// stopped by its context), the failure.
func (r *runState) end(err error, failed bool) {
	r.mu.Lock()
	r.finished = time.Now()
	if failed {
		r.phase, r.err = PhaseFailed, err
	}
	r.mu.Unlock()
}

func (r *runState) setPhase(p Phase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = p
}

// entered tells onPhase, when set, that the task entered p.
func (r *runState) entered(p Phase) {
	if r.onPhase != nil {
		r.onPhase(p)
	}
}

// setWindows keeps the source oplogs' windows last read.
func (r *runState) setWindows(w []OplogWindow) {
	r.mu.Lock()
	r.windows = w
	r.mu.Unlock()
}

// report fills s's phase, error, times and oplog windows, given the
// copy's status and when replay started (zero before); with runs under
// the same lock, so that what it reads (the last verification report,
// kept before the phase moves on) is no older than the phase.
func (r *runState) report(s *Status, c fullsync.Status, streamAt time.Time, with func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	with()
	s.Phase, s.StartedAt = r.phase, r.started
	s.OplogWindows = append([]OplogWindow(nil), r.windows...)
	if r.err != nil {
		s.Error = r.err.Error()
	}
	s.StartupSeconds, s.Starting = r.startup(c, streamAt)
	if !r.started.IsZero() {
		end := r.finished
		if end.IsZero() {
			end = time.Now()
		}
		s.ElapsedSeconds = end.Sub(r.started).Seconds()
	}
}

// startup returns the run's start-up time and whether it is still
// starting, given when replay started (zero before). Called with r.mu
// held.
func (r *runState) startup(c fullsync.Status, streamAt time.Time) (float64, bool) {
	switch {
	case r.started.IsZero():
		return 0, false
	case !c.FirstDocumentAt.IsZero():
		return c.FirstDocumentAt.Sub(r.started).Seconds(), false
	case !streamAt.IsZero():
		return streamAt.Sub(r.started).Seconds(), false
	case r.phase != PhasePending && r.phase != PhaseFullSync:
		return 0, false
	}
	end := r.finished
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(r.started).Seconds(), r.finished.IsZero()
}
