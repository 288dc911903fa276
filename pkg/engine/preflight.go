package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// preflight runs the checks that stop a task before anything is written:
// the selection, the source's oplogs and incremental.startAt. It is made
// for each use from the engine's parts (Engine.preflight).
type preflight struct {
	task *config.Task
	// endpoints: the source, the mapper and the store.
	endpoints
	streaming streamer
	// log is the logger without the task key (Engine.baseLog).
	log *slog.Logger
	// scripted: Options.Reader or Options.ShardReader replaces the oplog
	// readers (tests).
	scripted bool
}

// preflight returns the checks before anything is written, given the
// engine's parts.
func (e *Engine) preflight() preflight {
	return preflight{task: e.task, endpoints: e.endpoints, streaming: e.streaming,
		log: e.baseLog(), scripted: e.opts.Reader != nil || e.opts.ShardReader != nil}
}

// checkSelection applies the task's namespace rules to the source's
// collections before anything is written: it warns about include patterns
// that select nothing, and fails when two selected collections would be
// written to one target collection, or when nothing is selected (in mode
// full, or because namespaces.exclude removed what include selected; a
// replaying task whose include matches nothing yet may wait for the
// collections to be created).
func (p preflight) checkSelection(ctx context.Context) error {
	names, err := catalog.Names(ctx, p.source, p.mapper)
	if err != nil {
		return err
	}
	sel := p.mapper.Select(names)
	if msg := sel.Waiting(p.task.Namespaces.Include); msg != "" && p.task.Mode != config.ModeFull {
		p.log.WarnContext(ctx, msg)
	} else {
		for _, why := range sel.Warnings {
			p.log.WarnContext(ctx, why)
		}
	}
	if err := sel.Err(); err != nil && (p.task.Mode == config.ModeFull || sel.Excluded) {
		return err
	}
	return p.mapper.Collisions(sel.Selected)
}

// checkOplogs fails with source.ErrNoOplog, before anything is written,
// when the task replays the oplog of a source, or of a shard this process
// replays (every shard, for the process that runs the copy), that keeps
// none: the copy would finish and replay would wait
// forever for changes. Scripted readers (tests) need no oplog.
func (p preflight) checkOplogs(ctx context.Context) error {
	spec := &p.task.Spec
	if spec.Mode == config.ModeFull || spec.Incremental.Method == config.MethodChangeStream || p.scripted {
		return nil
	}
	what := "mode: " + string(spec.Mode)
	if spec.Mode == config.ModeIncremental {
		what += " with incremental.method: oplog"
	}
	return p.streaming.CheckOplogs(ctx, what)
}

// ErrSelectionChanged means a task's namespaces differ from those its
// checkpoint was written for: continuing from it would not copy what the
// change adds.
var ErrSelectionChanged = errors.New("the task's namespaces changed since its checkpoint was written")

// checkSameSelection fails with ErrSelectionChanged, before anything is
// written, when the task's checkpoint (prev, if it exists) was written
// for other namespaces. Checkpoints from before the namespaces were kept
// are taken as they are.
func (p preflight) checkSameSelection(prev checkpoint.TaskRecord, exists bool) error {
	if !exists || prev.Selection == nil {
		return nil
	}
	changes := config.SelectionChanges(*prev.Selection, p.task.Namespaces)
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
func (p preflight) checkGivenStart(ctx context.Context) error {
	spec := &p.task.Spec
	if spec.Incremental.StartAt == "" || spec.Mode == config.ModeFull || p.streaming.Follows() {
		return nil
	}
	if prev, err := p.store.Task(ctx); err == nil && prev.HasStart() {
		return nil
	}
	_, _, err := p.givenStart(ctx, spec.Incremental.Method != config.MethodChangeStream)
	return err
}

// givenStart is the replay start of a task with incremental.startAt and no
// checkpoint yet: the given position, for the replica set or for every
// shard. Read from the oplog, it must still be there: a position older
// than the source's (or a shard's) oldest entry fails with
// ErrOplogWindowLost before anything is recorded or written, since the
// changes between it and the oldest entry are gone.
func (p preflight) givenStart(ctx context.Context, useOplog bool) (bson.Timestamp, map[string]bson.Timestamp, error) {
	ts, err := config.ParseStartAt(p.task.Incremental.StartAt)
	if err != nil {
		return ts, nil, fmt.Errorf("incremental.startAt: %w", err)
	}
	starts, err := p.streaming.CheckGivenStart(ctx, ts, useOplog)
	return ts, starts, err
}
