package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/shardedsource"
)

// Copy-only workers share a replica-set source's full copy with the
// task's run (fullSync.workers above 1; docs/architecture.md, "The full
// copy"). The task's run plans and prepares every collection, copies
// ranges it claims and records the copy done; a copy-only worker only
// claims and copies ranges of collections already planned. Both claim
// each range through a lease on the target (rangelease), so that a range
// is read by one worker at a time, recorded done once, and taken over
// from a killed worker.

// copyOnlyPoll is how often a copy-only worker with nothing to claim
// looks again for new plans, ranges taken over, or the copy's end.
const copyOnlyPoll = 2 * time.Second

// ErrCopyOnly is returned when a copy-only worker cannot run the task.
var ErrCopyOnly = errors.New("copy-only worker")

// copyLeaser returns the range leases the copy through one client shares
// between processes, with how many processes copy at once: the task's
// run and its copy-only workers (fullSync.workers), or the workers of a
// sharded source's shards, which share what is read through mongos
// (collections not copied shard by shard). Nil when one process copies.
// shards is the sharded source's supervision, nil for a source read as
// one; the leases are kept on target.
func copyLeaser(task *config.Task, opts Options, shards *shardedsource.Source, target *mongo.Client) (*rangelease.Leaser, int, error) {
	spec := &task.Spec
	workers := spec.FullSync.Workers
	switch {
	case opts.CopyOnly && (workers <= 1 || spec.Mode == config.ModeIncremental):
		return nil, 0, fmt.Errorf("%w: task %s has fullSync.workers %d and mode %s, so its run copies without range leases and shares nothing: set fullSync.workers to 2 or more (restart the task's run too), or stop this worker",
			ErrCopyOnly, task.Name, workers, spec.Mode)
	case shards != nil && (workers > 1 || opts.CopyOnly):
		return nil, 0, fmt.Errorf("%w: the source is sharded and replayed shard by shard, so it is copied by one worker per shard (fullSync.shardedCopy), not by copy-only workers: set fullSync.workers to 1", ErrCopyOnly)
	case spec.Mode == config.ModeIncremental:
		return nil, 0, nil
	case shards != nil && opts.Shard != "":
		workers = shards.ShardCount()
	case workers <= 1:
		return nil, 0, nil
	}
	return rangelease.New(target.Database(spec.Checkpoint.Database),
		rangelease.Options{Task: task.Name, Owner: rangelease.Owner(), TTL: rangelease.DefaultTTL}), workers, nil
}

// runCopyOnly is a copy-only worker's run: it copies the ranges it can
// claim until the task's run records the copy done. It takes no task
// lease and writes no checkpoint: the task's run records each range done
// from the leases. It reads the task's record in store, copies with
// copier and reports its phase in state.
func runCopyOnly(ctx context.Context, log *slog.Logger, store *checkpoint.Store, copier Copier, state *runState) error {
	log.Info("copy-only worker: copying ranges of the task's plan as the task's run saves them, until it records the copy done")
	waiting := time.Time{}
	for {
		rec, err := store.Task(ctx)
		switch {
		case err == nil && rec.CopyDone:
			if err := copier.HelpDone(ctx); err != nil {
				return err
			}
			log.Info("copy-only worker: the task's run recorded the full copy done; nothing left for this worker")
			state.setPhase(PhaseCompleted)
			return nil
		case err != nil && !errors.Is(err, mongo.ErrNoDocuments):
			return err
		}
		open, err := copier.HelpCopy(ctx)
		if err != nil {
			return err
		}
		if copier.Status().CopiedThisRun > 0 || open > 0 {
			state.setPhase(PhaseFullSync)
		}
		if time.Since(waiting) > 30*time.Second {
			log.Info("copy-only worker: waiting for the task's run", "rangesNotDone", open, "documentsCopied", copier.Status().CopiedThisRun)
			waiting = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(copyOnlyPoll):
		}
	}
}
