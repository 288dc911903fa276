package shardedsource

import (
	"context"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// A worker of the operator runs one shard's subtask (Options.Shard). The
// worker of the shard whose name sorts first (copyLeader) runs the task
// as `ferry run` does; the others run RunShardWorker: they copy their
// shard's part of a per-shard copy and wait for the copy's end, then
// stream their shard, and follow a cut-over it moves
// (cutover_sharded.go).

// RunShardWorker runs one shard's subtask in a worker that does not run
// the copy: it waits for the worker that does, then streams.
func (s *Source) RunShardWorker(ctx context.Context) error {
	if err := s.run.TakeLease(); err != nil {
		return err
	}
	s.run.SetPhase(workerapi.PhasePending)
	s.noteStaleFailure(ctx)
	s.log.Info("waiting for the worker that records the start positions and runs the full copy", "shard", s.opts.Shard)
	if err := s.waitForLeader(ctx); err != nil {
		return err
	}
	if err := s.followCutover(ctx); err != nil {
		return err
	}
	if s.cutoverStep() != workerapi.CutoverComplete {
		s.run.SetPhase(workerapi.PhaseStreaming)
		if err := s.streamSharded(ctx); err != nil {
			return err
		}
		if step := s.cutoverStep(); step != "" && step != workerapi.CutoverFailed {
			if err := s.awaitCutover(ctx); err != nil {
				return err
			}
		}
	}
	s.run.SetPhase(workerapi.PhaseCompleted)
	return nil
}

// waitForLeader blocks a worker that does not run the copy until the
// worker that does has recorded this shard's start position and, with a
// full copy, finished it; meanwhile it copies its shard's part of every
// pass of a per-shard copy the leader saves (and helps with the others'),
// and ranges the leader reads through mongos.
func (s *Source) waitForLeader(ctx context.Context) error {
	for {
		if s.perShard != nil {
			if err := s.perShard.follow(ctx); err != nil {
				return err
			}
		}
		// The ranges the leader reads through mongos (collections not
		// copied shard by shard), shared by every shard's worker.
		if s.sharesCopy {
			if _, err := s.run.HelpCopy(ctx); err != nil {
				return err
			}
		}
		rec, err := s.store.Task(ctx)
		// The leader records every shard's start before the copy (and
		// the task's start after them): once the copy is done (or, with
		// no copy, the task's start is recorded) a shard without a record
		// joined later and starts at its first entry.
		if err == nil && rec.CopyDone {
			return nil
		}
		if err == nil && s.task.Mode == config.ModeIncremental {
			// The task's start is zero when every shard's oplog was empty.
			if _, serr := s.store.ShardRecord(ctx, s.opts.Shard); rec.HasStart() || serr == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
