package engine

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// stream replays the oplog from the checkpoint until ctx ends, or, with
// UntilCaughtUp, until everything the source wrote is applied.
func (e *Engine) stream(ctx context.Context) error {
	rec, err := e.store.Task(ctx)
	if err != nil {
		return err
	}
	from := rec.ResumeTS()
	reader, closeReader, err := e.openReader(ctx, rec, from)
	if err != nil {
		return err
	}
	defer closeReader()
	r, err := e.newStreamReplayer(ctx, rec, from, reader)
	if err != nil {
		return err
	}
	e.replayer.Store(&r)
	e.mu.Lock()
	if e.streamAt.IsZero() {
		e.streamAt = time.Now()
	}
	e.mu.Unlock()
	e.log.Info("replaying the oplog", "from", from)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go e.verification.whileStreaming(rctx)
	caughtUp := make(chan struct{})
	// With a cut-over, driveCutover decides when replay stops.
	var cutoverDone chan error
	if e.cutoverStep() != "" {
		cutoverDone = make(chan error, 1)
		go func() {
			err := e.driveCutover(rctx, r)
			if err == nil {
				close(caughtUp)
			}
			stop()
			cutoverDone <- err
		}()
	} else {
		go e.watchCaughtUp(rctx, r, caughtUp, stop)
	}
	err = r.Run(rctx)
	stop()
	if cutoverDone != nil {
		if cerr := <-cutoverDone; cerr != nil && ctx.Err() == nil && !errors.Is(cerr, context.Canceled) {
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return errors.Join(cerr, err)
		}
	}
	select {
	case <-caughtUp:
		e.log.Info("caught up with the source", "applied", r.Status().AppliedTS)
		return nil
	default:
	}
	return err
}

// openReader opens what replay reads from: the tests' scripted reader,
// a change stream, or the source's oplog from its checkpoint (checked to
// be still in the oplog). closeReader releases it once replay ends.
func (e *Engine) openReader(ctx context.Context, rec checkpoint.TaskRecord, from bson.Timestamp) (reader source.OplogReader, closeReader func(), err error) {
	closeReader = func() {}
	switch {
	case e.opts.Reader != nil:
		reader = e.opts.Reader(from)
	case e.task.Incremental.Method == config.MethodChangeStream:
		cs := source.NewChangeStreamReader(e.source, from, source.ChangeStreamOptions{})
		closeReader = func() { _ = cs.Close(context.WithoutCancel(ctx)) }
		reader = cs
	default:
		if err := source.CheckWindow(ctx, e.source, from, rec.ResumesFromEmptyOplog()); err != nil {
			return nil, closeReader, err
		}
		tailer := source.NewTailer(e.source, from)
		tailer.SkipDatabases = []string{"local", "config", e.task.Checkpoint.Database}
		if e.srcProfile.OplogHasHoles {
			tailer.Settle = 2 * time.Second
			tailer.Log = e.baseLog()
			e.log.Info("the source's oplog may show entries out of order: entries are applied once 2s old, and one that shows up later has its documents re-read from the source")
		}
		// Lag from the tailer's own reads: a query for the newest entry
		// would read the whole oplog again.
		tailer.NewestFromReads = e.srcProfile.OplogQueriesScan && tailer.Settle > 0
		reader = tailer
		e.tailer.Store(tailer)
	}
	return reader, closeReader, nil
}

// newStreamReplayer makes the replayer of a replica set's oplog (or a
// change stream), from the task's record and the target's profile.
func (e *Engine) newStreamReplayer(ctx context.Context, rec checkpoint.TaskRecord, from bson.Timestamp, reader source.OplogReader) (Replayer, error) {
	unique, selected, err := e.replayParams(ctx)
	if err != nil {
		return nil, err
	}
	store := e.store
	if l, ok := reader.(checkpoint.EntryLog); ok {
		store = store.WithEntries(l) // checked at resume: source.CheckRollback
	}
	r := e.newReplayer(replay.Options{
		Task: e.task.Name, Spec: &e.task.Spec, Reader: reader, Source: e.source, Target: e.target, Store: store,
		Mapper: e.mapper, Log: e.baseLog(), From: from, OverlapUntil: rec.CopyEndTS,
		CheckpointInterval: e.opts.CheckpointInterval, ObserveWrite: e.opts.ObserveReplay, UniqueIndexed: unique, Selected: selected,
		MaxWriteBatch: e.dstProfile.MaxWriteBatch, BulkWrite: e.dstProfile.BulkWriteCommand, WriteConcern: conn.WriteConcern(e.task.Target.URI), IndexesOneByOne: e.dstProfile.IndexesOneByOne, SerialUpdates: e.dstProfile.SerialUpdates,
		ReinsertReplacements: e.dstProfile.ReinsertReplacements,
		ShardKeys:            e.replayShardKeys(), TargetMajor: e.dstProfile.Major,
		Translator: oplog.Translator{
			WholeDocumentUpdates: e.srcProfile.UpdateShape == conn.UpdatesAsWholeDocument,
			PipelineUpdates:      e.dstProfile.PipelineUpdates,
		},
	})
	return r, nil
}

// watchCaughtUp ends replay (stop) once, with UntilCaughtUp, it has been
// caught up with a fresh read of the source for three looks a second
// apart; it closes caughtUp first.
func (e *Engine) watchCaughtUp(rctx context.Context, r Replayer, caughtUp chan struct{}, stop context.CancelFunc) {
	streak := 0
	for rctx.Err() == nil {
		time.Sleep(time.Second)
		if s := r.Status(); e.untilCaughtUp.Load() && s.CaughtUp() && e.freshNewest(e.tailer.Load()) {
			streak++
		} else {
			streak = 0
		}
		if streak >= 3 {
			close(caughtUp)
			stop()
			return
		}
	}
}

// replayParams reads what every replayer of the task shares: the
// selected source namespaces, and the target namespaces with a unique
// secondary index.
func (e *Engine) replayParams(ctx context.Context) (unique map[string]bool, selected []catalog.Namespace, err error) {
	colls, err := catalog.List(ctx, e.source, e.mapper)
	if err != nil {
		return nil, nil, err
	}
	unique, selected = map[string]bool{}, []catalog.Namespace{}
	for _, c := range colls {
		selected = append(selected, c.Source)
		if c.HasUniqueIndex() {
			unique[c.Target.String()] = true
		}
	}
	return unique, selected, nil
}

// FinishWhenCaughtUp asks a streaming task to stop replay once everything
// the source wrote is applied, then verify and complete: the cut-over.
func (e *Engine) FinishWhenCaughtUp() {
	e.finishAsked.CompareAndSwap(0, time.Now().UnixNano())
	e.untilCaughtUp.Store(true)
}

// freshNewest reports whether the reader's newest position, which replay
// compares its checkpoint with, was read after the cut-over was asked
// for: a reader that answers from reads it runs at its own pace (a
// Settle-mode tailer) may hold an older answer, which could miss the last
// writes made before the cut-over.
func (e *Engine) freshNewest(t *source.Tailer) bool {
	asked := e.finishAsked.Load()
	return t == nil || asked == 0 || !t.NewestReadAt().Before(time.Unix(0, asked))
}
