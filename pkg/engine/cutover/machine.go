// Package cutover runs a task's cut-over as a state machine over small
// interfaces: Machine holds the record and moves it step by step
// (machine.go), Drive and Finish run the steps of a replica-set source
// (replicaset.go), Lead those of a sharded one (sharded.go), and Follow
// and Await let the other workers of a sharded source track the record
// and end with the run that moves it (follow.go).
//
// The cut-over (cutover.requested in the task) walks these steps, each
// recorded in the checkpoint database (checkpoint.CutoversCollection)
// before it starts so that a restarted run goes on from the step it
// reached:
//
//	CatchingUp      replay runs until the lag is at most maxLagSeconds
//	BlockingWrites  setUserWriteBlockMode on the source (blockSourceWrites)
//	Draining        the source's newest position is read and recorded;
//	                replay stops once everything up to it is applied
//	Verifying       cutover.verify compares the target with the source
//	Finalizing      the target gets back the options the sync deferred
//	Complete        the target's newest oplog position is recorded
//
// The first three run while replay streams (Drive), the others after it
// stopped (Finish). Writes stay blocked after a cut-over with
// blockSourceWrites, so the application cannot write to the old
// deployment by mistake. A sharded source runs the first three shard by
// shard (sharded.go), the others as here. docs/cutover.md describes the
// cut-over for users.
package cutover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// ErrNotSupported is returned for a cut-over this build cannot run.
var ErrNotSupported = errors.New("cut-over not supported")

// ErrFailed wraps the error a cut-over step failed on, once the failure
// is recorded: running the same request again fails again until
// something changes (the request's options, the deployment).
var ErrFailed = errors.New("cut-over failed")

// Poll is how often the cut-over looks at replay's progress.
const Poll = 500 * time.Millisecond

// Store is where the cut-over is recorded (checkpoint.Store).
type Store interface {
	// SetCutover records the task-wide cut-over.
	SetCutover(ctx context.Context, c checkpoint.CutoverRecord) error
	// Task reads the task record (with the cut-over other workers moved).
	Task(ctx context.Context) (checkpoint.TaskRecord, error)
	// Shards reads every shard's record, by shard name.
	Shards(ctx context.Context) (map[string]checkpoint.ShardRecord, error)
	// SetShardCutover records a shard's part in the cut-over.
	SetShardCutover(ctx context.Context, shard string, c checkpoint.ShardCutover) error
}

// Replay is the running replay as the drain watches it.
type Replay interface {
	// Status is a value snapshot of replay.
	Status() replay.Status
	// Checkpoint is the position at and below which every entry is
	// applied.
	Checkpoint() bson.Timestamp
}

// Source is the source deployment as the cut-over acts on it.
type Source interface {
	// BlockWrites blocks user writes (setUserWriteBlockMode; through
	// mongos for the whole cluster of a sharded source).
	BlockWrites(ctx context.Context) error
	// NewestTS is the newest oplog position of the source (of shard, for
	// a sharded source; "" for a replica set); zero for an empty oplog.
	NewestTS(ctx context.Context, shard string) (bson.Timestamp, error)
}

// Target is what the steps after the drain need.
type Target interface {
	// CheckDrained fails unless the saved checkpoints reached the drain
	// position c records (each shard's, for a sharded source).
	CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error
	// Verify compares the target with the source in mode and returns the
	// namespaces that differ.
	Verify(ctx context.Context, mode config.VerifyMode) (differing []string, err error)
	// WritesAfterDrain says why a verification may have failed: the
	// source took writes after the drain ("" when it did not).
	WritesAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) string
	// Finalize restores on the target the options the sync deferred.
	Finalize(ctx context.Context) error
	// Position is the target's newest oplog position, recorded at
	// Complete for a reverse sync.
	Position(ctx context.Context) (bson.Timestamp, error)
}

// Machine is one task's cut-over: its record and the steps that move
// it. Its methods are safe for concurrent use; none calls out while it
// holds its lock.
type Machine struct {
	opts   *config.Cutover
	store  Store
	log    *slog.Logger
	onStep func(step string)
	// errVerify is the sentinel a failed verification wraps.
	errVerify error

	mu sync.Mutex
	// co is the cut-over's state; nil when none runs.
	co *checkpoint.CutoverRecord
	// staleFailure is the start of the failed cut-over attempt recorded
	// when a worker following the cut-over started (zero when none
	// was): that failure is an earlier attempt's (Follow).
	staleFailure time.Time
}

// Config makes a Machine.
type Config struct {
	// Options are the task's cutover options; read, never written.
	Options *config.Cutover
	Store   Store
	Log     *slog.Logger
	// OnStep, when set, is told each step once it is recorded.
	OnStep func(step string)
	// ErrVerify is the sentinel a verification that found differences
	// wraps.
	ErrVerify error
}

// New makes the Machine of a task; no cut-over runs until Load.
func New(c Config) *Machine {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Machine{opts: c.Options, store: c.Store, log: log, onStep: c.OnStep, errVerify: c.ErrVerify}
}

// Check refuses, before anything is written, a cut-over this build
// cannot run.
func Check(task *config.Task) error {
	if !task.Cutover.Requested {
		return nil
	}
	switch {
	case task.Mode == config.ModeFull:
		return fmt.Errorf("cutover.requested: %w for mode full (there is no replay to drain); use mode incremental or fullAndIncremental", ErrNotSupported)
	case task.Incremental.Method == config.MethodChangeStream:
		return fmt.Errorf("cutover.requested: %w with incremental.method changeStream yet; use method oplog", ErrNotSupported)
	}
	return nil
}

// Load sets the cut-over's state from the task record at the start of a
// run: the step it reached, or CatchingUp for a new request or one that
// failed before (it starts over). It reports whether a cut-over runs or
// is complete.
func (m *Machine) Load(rec checkpoint.TaskRecord) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case rec.Cutover != nil && rec.Cutover.Step == workerapi.CutoverComplete:
		c := *rec.Cutover
		m.co = &c
	case !m.opts.Requested:
		return false
	case rec.Cutover != nil && rec.Cutover.Step != workerapi.CutoverFailed:
		c := *rec.Cutover
		m.co = &c
	default:
		m.co = &checkpoint.CutoverRecord{Step: workerapi.CutoverCatchingUp, StartedAt: time.Now().UTC().Truncate(time.Millisecond)}
		if rec.Cutover != nil && rec.Cutover.WritesBlocked {
			m.co.WritesBlocked = true
		}
	}
	return true
}

// Step returns the cut-over's current step, "" when none runs.
func (m *Machine) Step() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.co == nil {
		return ""
	}
	return m.co.Step
}

// Record returns the cut-over's record; call it only while one runs.
func (m *Machine) Record() checkpoint.CutoverRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *m.co
}

// Running reports whether a cut-over runs or ran in this process.
func (m *Machine) Running() bool { return m.Step() != "" }

// Advance changes the cut-over's state with set and records it.
func (m *Machine) Advance(ctx context.Context, set func(*checkpoint.CutoverRecord)) error {
	m.mu.Lock()
	c := *m.co
	set(&c)
	m.co = &c
	m.mu.Unlock()
	if err := m.store.SetCutover(ctx, c); err != nil {
		return err
	}
	m.log.Info("cut-over", "step", c.Step, "caughtUp", c.CaughtUp, "writesBlocked", c.WritesBlocked, "sourceTS", c.SourceTS)
	if m.onStep != nil {
		m.onStep(c.Step)
	}
	return nil
}

// Fail records that the cut-over failed at its step, with why; the next
// run starts it over. A step cut short because the run is stopping (ctx
// ended: a signal, a lost lease) is not a failure: it stays recorded as
// it is, and the next run goes on from it.
func (m *Machine) Fail(ctx context.Context, err error) error {
	step := m.Step()
	if ctx.Err() != nil {
		return fmt.Errorf("cut-over, step %s: %w", step, err)
	}
	_ = m.Advance(context.Background(), func(c *checkpoint.CutoverRecord) {
		c.Step, c.Message = workerapi.CutoverFailed, fmt.Sprintf("%s: %v", step, err)
	})
	return fmt.Errorf("%w, step %s: %w", ErrFailed, step, err)
}

// SetMessage sets what the running step waits for, without recording it.
func (m *Machine) SetMessage(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.co != nil {
		m.co.Message = msg
	}
}

// LagGate reports whether replay is close enough to the source for the
// cut-over to leave CatchingUp (lag at most maxLag seconds, measured from
// a fresh read of the source's newest position), and otherwise what it
// waits for. A lag not known yet never passes: it is not a small one.
func LagGate(s replay.Status, maxLag int, fresh bool) (bool, string) {
	switch {
	case !s.LagKnown():
		return false, fmt.Sprintf("lag unknown (%s); the cut-over goes on once it is at most %ds", s.LagUnknown, maxLag)
	case s.LagSeconds > float64(maxLag):
		return false, fmt.Sprintf("lag %s; the cut-over goes on once it is at most %ds", s.LagText(), maxLag)
	case !fresh:
		return false, fmt.Sprintf("lag %s by a read of the source's newest position made before the cut-over was asked for; waiting for a newer one", s.LagText())
	}
	return true, ""
}

// passes is LagGate's verdict without its reason.
func passes(pass bool, _ string) bool { return pass }

// Progress is how far a running verification is.
type Progress struct {
	NS          string
	Done, Total int64
}

// Status is the cut-over as /status reports it; nil when none runs.
// prog is the running verification's progress.
func (m *Machine) Status(prog Progress) *workerapi.Cutover {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.co == nil {
		return nil
	}
	c := m.co
	s := &workerapi.Cutover{Step: c.Step, CaughtUp: c.CaughtUp, WritesBlocked: c.WritesBlocked, StartedAt: c.StartedAt, Message: c.Message}
	if !c.SourceTS.IsZero() {
		s.SourcePosition = &workerapi.Timestamp{T: c.SourceTS.T, I: c.SourceTS.I}
	}
	if !c.TargetTS.IsZero() {
		s.TargetPosition = &workerapi.Timestamp{T: c.TargetTS.T, I: c.TargetTS.I}
	}
	if !c.FinishedAt.IsZero() {
		at := c.FinishedAt
		s.FinishedAt = &at
	}
	switch {
	case c.Verify != nil:
		s.Verify = &workerapi.Verify{Mode: c.Verify.Mode, OK: c.Verify.OK, Differing: c.Verify.Differing}
	case c.Step == workerapi.CutoverVerifying:
		s.Verify = &workerapi.Verify{Mode: string(m.opts.Verify), Running: true,
			CurrentNS: prog.NS, Done: prog.Done, Total: prog.Total}
	}
	return s
}
