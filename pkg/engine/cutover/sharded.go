package cutover

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// The cut-over of a sharded source walks the steps of the package comment
// with one subtask per shard: the task-wide step lives in the task record,
// each shard's part (checkpoint.ShardCutover: caught up, drain position,
// drained) in its shard record, so one process running every subtask and
// one worker per shard take the same path. Lead moves the task-wide step
// and reads every shard's drain position at one moment; Follow tracks the
// record from the other workers. The steps shard by shard and why chunk
// migrations may go on: docs/sharded.md, "Cut-over"; the workers' part and
// their bound after a failure: docs/cutover.md, "One worker per shard".

// Subtask is one shard's replay as the cut-over drives it.
type Subtask interface {
	// Shard is the shard's name.
	Shard() string
	// Replay is the running replay; nil while it does not run.
	Replay() Replay
	// SetCutover shows the shard's part in the cut-over in its status.
	SetCutover(c checkpoint.ShardCutover)
	// StopDrained stops the subtask, which applied everything up to its
	// drain position, checks the checkpoint it saved and records it
	// drained (c with Drained set).
	StopDrained(ctx context.Context, c checkpoint.ShardCutover) error
}

// Attempt is the running cut-over's start time: it names the attempt
// that the shard records' parts belong to.
func (m *Machine) Attempt() time.Time { return m.Record().StartedAt }

// ShardedRunning reports whether a sharded cut-over drives this
// process's subtasks: a step before Verifying that is not Failed.
func (m *Machine) ShardedRunning() bool {
	switch m.Step() {
	case workerapi.CutoverCatchingUp, workerapi.CutoverBlockingWrites, workerapi.CutoverDraining:
		return true
	}
	return false
}

// ShardDrained reports whether a shard's record says its subtask drained
// in the running cut-over (so it is not started again).
func (m *Machine) ShardDrained(rec checkpoint.ShardRecord) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return DrainedIn(m.co, rec)
}

// DrainedIn reports whether a shard's record says it drained in the
// cut-over c, which still stands (Draining or later, not Failed).
func DrainedIn(c *checkpoint.CutoverRecord, rec checkpoint.ShardRecord) bool {
	if c == nil {
		return false
	}
	switch c.Step {
	case workerapi.CutoverDraining, workerapi.CutoverVerifying, workerapi.CutoverFinalizing, workerapi.CutoverComplete:
		return rec.CutoverOf(c.StartedAt).Drained
	}
	return false
}

// StartSharded records a new cut-over before the subtasks run, so that
// the task record says one runs (the other workers follow it). Only the
// worker that moves the step calls it.
func (m *Machine) StartSharded(ctx context.Context) error {
	if m.Step() != workerapi.CutoverCatchingUp {
		return nil
	}
	return m.Advance(ctx, func(*checkpoint.CutoverRecord) {})
}

// DriveShards takes this process's subtasks through their part: record
// CaughtUp, then, once the drain position is recorded, stop at it and
// record Drained. It reports whether all of them are drained or retired.
func (m *Machine) DriveShards(ctx context.Context, recs map[string]checkpoint.ShardRecord, subs []Subtask) (bool, error) {
	attempt := m.Attempt()
	maxLag := m.opts.MaxLagSeconds
	all := true
	for _, st := range subs {
		name := st.Shard()
		rec, ok := recs[name]
		if !ok {
			continue
		}
		c := rec.CutoverOf(attempt)
		st.SetCutover(c)
		if rec.Retired || c.Drained {
			continue
		}
		all = false
		r := st.Replay()
		if r == nil {
			continue
		}
		switch {
		case !c.CaughtUp:
			if s := r.Status(); passes(LagGate(s, maxLag, true)) {
				c.CaughtUp = true
				if err := m.store.SetShardCutover(ctx, name, c); err != nil {
					return false, err
				}
				st.SetCutover(c)
				m.log.Info("cut-over: the shard caught up", "shard", name, "lag", s.LagSeconds)
			}
		case c.DrainTS.IsZero():
			// The worker moving the step records it once every shard
			// caught up and writes stopped.
		case r.Checkpoint().Compare(c.DrainTS) >= 0 && r.Status().InFlight == 0 && r.Status().Holds.Rechecks == 0:
			if err := st.StopDrained(ctx, c); err != nil {
				return false, err
			}
		}
	}
	return all, nil
}

// Lead moves the task-wide step (the copy leader's job): on once every
// shard caught up, writes blocked, the drain positions read and
// recorded, and done once every shard drained.
func (m *Machine) Lead(ctx context.Context, recs map[string]checkpoint.ShardRecord, src Source) (bool, error) {
	attempt := m.Attempt()
	var live []checkpoint.ShardRecord
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		if rec := recs[name]; rec.Started && !rec.Retired {
			live = append(live, rec)
		}
	}
	switch m.Step() {
	case workerapi.CutoverCatchingUp:
		var behind []string
		for _, rec := range live {
			if !rec.CutoverOf(attempt).CaughtUp {
				behind = append(behind, rec.Shard)
			}
		}
		if len(behind) > 0 {
			m.SetMessage(fmt.Sprintf("shards %s: lag above %ds or not known yet; the cut-over goes on once every shard's is known and at most that", strings.Join(behind, ", "), m.opts.MaxLagSeconds))
			return false, nil
		}
		next := m.afterCatchUp()
		return false, m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.CaughtUp, c.Step, c.Message = true, next, "" })
	case workerapi.CutoverBlockingWrites:
		// Through mongos: the block applies to every shard of the cluster.
		if err := src.BlockWrites(ctx); err != nil {
			return false, m.Fail(ctx, err)
		}
		return false, m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.WritesBlocked, c.Step = true, workerapi.CutoverDraining })
	case workerapi.CutoverDraining:
		return m.leadDrain(ctx, attempt, live, src)
	}
	return false, nil
}

// leadDrain records the drain position of every shard without one, then
// waits for every shard to drain; the task's SourceTS becomes the highest
// drain position.
func (m *Machine) leadDrain(ctx context.Context, attempt time.Time, live []checkpoint.ShardRecord, src Source) (bool, error) {
	var high bson.Timestamp
	var waiting []string
	for _, rec := range live {
		c := rec.CutoverOf(attempt)
		if c.DrainTS.IsZero() {
			ts, err := src.NewestTS(ctx, rec.Shard)
			if err != nil {
				return false, fmt.Errorf("cut-over: shard %s: %w", rec.Shard, err)
			}
			if ts.IsZero() {
				// An empty oplog: nothing to drain beyond what is applied.
				ts = rec.ResumeTS()
			}
			c.CaughtUp, c.DrainTS = true, ts
			if err := m.store.SetShardCutover(ctx, rec.Shard, c); err != nil {
				return false, err
			}
			m.log.Info("cut-over: recorded the shard's drain position", "shard", rec.Shard, "ts", ts)
		}
		if !c.Drained {
			waiting = append(waiting, rec.Shard)
		}
		if c.DrainTS.Compare(high) > 0 {
			high = c.DrainTS
		}
	}
	if len(waiting) > 0 {
		m.SetMessage(fmt.Sprintf("replaying shards %s up to their newest positions", strings.Join(waiting, ", ")))
		return false, nil
	}
	if c := m.Record(); c.SourceTS != high || high.IsZero() {
		if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.SourceTS = high }); err != nil {
			return false, err
		}
	}
	m.log.Info("every shard drained to its newest position", "ts", high)
	return true, nil
}

// CheckShardsDrained is Finish's check for a sharded source: every shard
// that is not retired saved a checkpoint at or past its drain position.
func CheckShardsDrained(recs map[string]checkpoint.ShardRecord, attempt time.Time) error {
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		rec := recs[name]
		if !rec.Started || rec.Retired {
			continue
		}
		c := rec.CutoverOf(attempt)
		if at := rec.ResumeTS(); !c.Drained || at.Compare(c.DrainTS) < 0 {
			return fmt.Errorf("cut-over: shard %s is not drained (checkpoint %d,%d, drain position %d,%d)", name, at.T, at.I, c.DrainTS.T, c.DrainTS.I)
		}
	}
	return nil
}
