package shardedsource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// A sharded source's cut-over (package cutover, sharded.go) drives this
// process's subtasks; this file gives it them and keeps what acts on the
// shard board.

// cutoverAttempt is the running cut-over's start time: it names the
// attempt that the shard records' parts belong to.
func (s *Source) cutoverAttempt() time.Time { return s.cut.Attempt() }

// shardedCutoverRunning reports whether a sharded cut-over drives this
// process's subtasks: a step before Verifying that is not Failed.
func (s *Source) shardedCutoverRunning() bool { return s.cut.ShardedRunning() }

// shardDrained reports whether a shard's record says its subtask drained
// in the running cut-over (so it is not started again).
func (s *Source) shardDrained(rec checkpoint.ShardRecord) bool { return s.cut.ShardDrained(rec) }

// startShardedCutover records a new cut-over before the subtasks run, so
// that the task record says one runs (the other workers follow it).
func (s *Source) startShardedCutover(ctx context.Context) error {
	if !s.copyLeader() {
		return nil
	}
	return s.cut.StartSharded(ctx)
}

// shardedCutoverTick takes the cut-over one look further; streamSharded
// calls it about every second. done reports that this process's subtasks
// are all drained (and, in the process that moves the step, every
// shard's), so streaming ends.
func (s *Source) shardedCutoverTick(ctx context.Context) (done bool, err error) {
	if !s.copyLeader() {
		if err := s.cut.Follow(ctx); err != nil {
			return false, err
		}
		if s.cutoverStep() == workerapi.CutoverComplete {
			return true, nil
		}
	}
	if !s.shardedCutoverRunning() {
		return false, nil
	}
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return false, err
	}
	var mine []cutover.Subtask
	for _, st := range s.subtaskList() {
		if s.mine(st.shard.Name) {
			mine = append(mine, cutoverSubtask{s, st})
		}
	}
	mineDone, err := s.cut.DriveShards(ctx, recs, mine)
	if err != nil {
		return false, err
	}
	if !s.copyLeader() {
		return mineDone, nil
	}
	return s.cut.Lead(ctx, recs, shardCutoverSource{s})
}

// cutoverStep returns the cut-over's current step, "" when none runs.
func (s *Source) cutoverStep() string { return s.cut.Step() }

// shardCutoverSource is the sharded source as the cut-over acts on it.
type shardCutoverSource struct{ s *Source }

// BlockWrites blocks the source's user writes through mongos: the whole
// cluster.
func (c shardCutoverSource) BlockWrites(ctx context.Context) error {
	return source.SetUserWriteBlock(ctx, c.s.source, true)
}

// NewestTS reads the newest oplog position of a shard through its
// subtask's connection (of the source through mongos for "").
func (c shardCutoverSource) NewestTS(ctx context.Context, shard string) (bson.Timestamp, error) {
	if shard == "" {
		return source.NewestTS(ctx, c.s.source)
	}
	c.s.subMu.Lock()
	st := c.s.subtasks[shard]
	c.s.subMu.Unlock()
	if st == nil {
		return bson.Timestamp{}, errors.New("it has a record but no connection")
	}
	return source.NewestTS(ctx, st.client)
}

// cutoverSubtask is a subtask as the cut-over drives it.
type cutoverSubtask struct {
	s  *Source
	st *subtask
}

func (s cutoverSubtask) Shard() string { return s.st.shard.Name }

func (s cutoverSubtask) Replay() cutover.Replay {
	if r := s.st.replayer.Load(); r != nil {
		return r
	}
	return nil
}

func (s cutoverSubtask) SetCutover(c checkpoint.ShardCutover) { s.st.setCutover(c) }

func (s cutoverSubtask) StopDrained(ctx context.Context, c checkpoint.ShardCutover) error {
	return s.s.stopDrained(ctx, s.st, c)
}

// stopDrained stops a subtask that applied everything up to its drain
// position, checks the checkpoint it saved on the way out, and records
// the shard as drained, on its record and on the shard board.
func (s *Source) stopDrained(ctx context.Context, st *subtask, c checkpoint.ShardCutover) error {
	name := st.shard.Name
	if st.cancel != nil {
		st.cancel()
		<-st.done
	}
	rec, err := s.store.ShardRecord(ctx, name)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); at.Compare(c.DrainTS) < 0 {
		return fmt.Errorf("cut-over: shard %s stopped with its checkpoint %d,%d below its drain position %d,%d", name, at.T, at.I, c.DrainTS.T, c.DrainTS.I)
	}
	c.Drained = true
	if err := s.store.SetShardCutover(ctx, name, c); err != nil {
		return err
	}
	st.setCutover(c)
	s.log.Info("cut-over: the shard is drained; its subtask stopped", "shard", name, "drainTS", c.DrainTS, "checkpoint", rec.ResumeTS())
	return s.publishDrained(ctx, name, rec)
}

// publishDrained puts a drained shard on the board: it holds nobody back.
func (s *Source) publishDrained(ctx context.Context, name string, rec checkpoint.ShardRecord) error {
	at := rec.ResumeTS()
	return s.board.Publish(ctx, board.Position{Shard: name, Read: at, Applied: at, Drained: true})
}

// undrain takes off the board the Drained marks that no cut-over stands
// behind any more (one that failed, or was withdrawn, after shards
// drained), before subtasks replay again: a shard so marked holds nobody
// back although its subtask may replay writes again. It goes by the
// records, not by what this process follows.
func (s *Source) undrain(ctx context.Context) error {
	ps, err := s.board.Positions(ctx)
	if err != nil || !slices.ContainsFunc(ps, func(p board.Position) bool { return p.Drained }) {
		return err
	}
	task, err := s.store.Task(ctx)
	if err != nil {
		return err
	}
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		rec, ok := recs[p.Shard]
		if !p.Drained || !ok || cutover.DrainedIn(task.Cutover, rec) {
			continue
		}
		at := rec.ResumeTS()
		if err := s.board.Publish(ctx, board.Position{Shard: p.Shard, Read: at, Applied: at, Retired: rec.Retired}); err != nil {
			return err
		}
	}
	return nil
}

// followCutover is how a worker that does not move the step learns it
// (cutover.Machine.Follow).
func (s *Source) followCutover(ctx context.Context) error { return s.cut.Follow(ctx) }

// noteStaleFailure remembers the failed attempt recorded when a worker
// following the cut-over starts (cutover.Machine.NoteStaleFailure).
func (s *Source) noteStaleFailure(ctx context.Context) { s.cut.NoteStaleFailure(ctx) }

// awaitCutover keeps a worker whose shard is drained until the worker
// moving the step records Complete (nil) or a failure.
func (s *Source) awaitCutover(ctx context.Context) error {
	s.run.SetPhase(workerapi.PhaseVerifying)
	s.log.Info("cut-over: this worker's shard is drained; waiting for the cut-over to complete", "shard", s.opts.Shard)
	return s.cut.Await(ctx)
}

func (st *subtask) setCutover(c checkpoint.ShardCutover) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.co = &c
}
