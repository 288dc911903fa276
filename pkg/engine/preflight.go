package engine

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// checkSelection applies the task's namespace rules to the source's
// collections before anything is written: it warns about include patterns
// that select nothing, and fails when two selected collections would be
// written to one target collection, or when nothing is selected (in mode
// full, or because namespaces.exclude removed what include selected; a
// replaying task whose include matches nothing yet may wait for the
// collections to be created).
func (e *Engine) checkSelection(ctx context.Context) error {
	names, err := catalog.Names(ctx, e.source, e.mapper)
	if err != nil {
		return err
	}
	sel := e.mapper.Select(names)
	if msg := sel.Waiting(e.task.Namespaces.Include); msg != "" && e.task.Mode != config.ModeFull {
		e.baseLog().WarnContext(ctx, msg)
	} else {
		for _, why := range sel.Warnings {
			e.baseLog().WarnContext(ctx, why)
		}
	}
	if err := sel.Err(); err != nil && (e.task.Mode == config.ModeFull || sel.Excluded) {
		return err
	}
	return e.mapper.Collisions(sel.Selected)
}

// checkOplogs fails with source.ErrNoOplog, before anything is written,
// when the task replays the oplog of a source, or of a shard this process
// replays (every shard, for the process that runs the copy), that keeps
// none: the copy would finish and replay would wait
// forever for changes. Scripted readers (tests) need no oplog.
func (e *Engine) checkOplogs(ctx context.Context) error {
	spec := &e.task.Spec
	if spec.Mode == config.ModeFull || spec.Incremental.Method == config.MethodChangeStream || e.opts.Reader != nil || e.opts.ShardReader != nil {
		return nil
	}
	what := "mode: " + string(spec.Mode)
	if spec.Mode == config.ModeIncremental {
		what += " with incremental.method: oplog"
	}
	return e.streaming.CheckOplogs(ctx, what)
}

// ErrSelectionChanged means a task's namespaces differ from those its
// checkpoint was written for: continuing from it would not copy what the
// change adds.
var ErrSelectionChanged = errors.New("the task's namespaces changed since its checkpoint was written")

// checkSameSelection fails with ErrSelectionChanged, before anything is
// written, when the task's checkpoint (prev, if it exists) was written
// for other namespaces. Checkpoints from before the namespaces were kept
// are taken as they are.
func (e *Engine) checkSameSelection(prev checkpoint.TaskRecord, exists bool) error {
	if !exists || prev.Selection == nil {
		return nil
	}
	changes := config.SelectionChanges(*prev.Selection, e.task.Namespaces)
	if changes == "" {
		return nil
	}
	return fmt.Errorf("%w (%s); nothing was written: continuing from the checkpoint would not copy what the change adds. "+
		"Start over: `ferry reset -f <task file>` drops the checkpoint (a SyncTask: delete it with deletePolicy: Delete and create it again), "+
		"or give the task a new name; set fullSync.dropTarget: true or fullSync.onConflict: overwrite for the target's earlier copy. "+
		"Or restore the namespaces to continue", ErrSelectionChanged, changes)
}

// checkGivenStart refuses, before the run takes its lease (the first
// write to the target's checkpoint database), a new task whose
// incremental.startAt is no longer in the source's oplog: nothing is
// written for a task that cannot start. A task with a checkpoint resumes
// from it and ignores startAt.
func (e *Engine) checkGivenStart(ctx context.Context) error {
	spec := &e.task.Spec
	if spec.Incremental.StartAt == "" || spec.Mode == config.ModeFull || e.streaming.Follows() {
		return nil
	}
	if prev, err := e.store.Task(ctx); err == nil && prev.HasStart() {
		return nil
	}
	_, _, err := e.givenStart(ctx, spec.Incremental.Method != config.MethodChangeStream)
	return err
}

// givenStart is the replay start of a task with incremental.startAt and no
// checkpoint yet: the given position, for the replica set or for every
// shard. Read from the oplog, it must still be there: a position older
// than the source's (or a shard's) oldest entry fails with
// ErrOplogWindowLost before anything is recorded or written, since the
// changes between it and the oldest entry are gone.
func (e *Engine) givenStart(ctx context.Context, useOplog bool) (bson.Timestamp, map[string]bson.Timestamp, error) {
	ts, err := config.ParseStartAt(e.task.Incremental.StartAt)
	if err != nil {
		return ts, nil, fmt.Errorf("incremental.startAt: %w", err)
	}
	starts, err := e.streaming.CheckGivenStart(ctx, ts, useOplog)
	return ts, starts, err
}
