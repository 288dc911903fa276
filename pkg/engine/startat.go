package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// checkGivenStart refuses, before the run takes its lease (the first
// write to the target's checkpoint database), a new task whose
// incremental.startAt is no longer in the source's oplog: nothing is
// written for a task that cannot start. A task with a checkpoint resumes
// from it and ignores startAt.
func (e *Engine) checkGivenStart(ctx context.Context) error {
	spec := &e.task.Spec
	if spec.Incremental.StartAt == "" || spec.Mode == config.ModeFull || e.streaming.follows() {
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
	starts, err := e.streaming.checkGivenStart(ctx, ts, useOplog)
	return ts, starts, err
}
