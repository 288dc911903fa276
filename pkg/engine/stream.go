package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Stream replays the oplog from the checkpoint until ctx ends, or, with
// UntilCaughtUp, until everything the source wrote is applied.
func (s *replicaSetStreamer) Stream(ctx context.Context) error {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return err
	}
	from := rec.ResumeTS()
	reader, closeReader, err := s.openReader(ctx, rec, from)
	if err != nil {
		return err
	}
	defer closeReader()
	r, err := s.newStreamReplayer(ctx, rec, from, reader)
	if err != nil {
		return err
	}
	s.replayer.Store(&r)
	now := time.Now()
	s.streamAt.CompareAndSwap(nil, &now)
	s.log.Info("replaying the oplog", "from", from)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.whileStreaming(rctx)
	caughtUp := make(chan struct{})
	// With a cut-over, driveCutover decides when replay stops.
	var cutoverDone chan error
	if s.cut.Step() != "" {
		cutoverDone = make(chan error, 1)
		go func() {
			err := s.driveCutover(rctx, r)
			if err == nil {
				close(caughtUp)
			}
			stop()
			cutoverDone <- err
		}()
	} else {
		go s.watchCaughtUp(rctx, r, caughtUp, stop)
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
		s.log.Info("caught up with the source", "applied", r.Status().AppliedTS)
		return nil
	default:
	}
	return err
}

// openReader opens what replay reads from: the tests' scripted reader,
// a change stream, or the source's oplog from its checkpoint (checked to
// be still in the oplog). closeReader releases it once replay ends.
func (s *replicaSetStreamer) openReader(ctx context.Context, rec checkpoint.TaskRecord, from bson.Timestamp) (reader source.OplogReader, closeReader func(), err error) {
	closeReader = func() {}
	switch {
	case s.reader != nil:
		reader = s.reader(from)
	case s.task.Incremental.Method == config.MethodChangeStream:
		cs := source.NewChangeStreamReader(s.source, from, source.ChangeStreamOptions{})
		closeReader = func() { _ = cs.Close(context.WithoutCancel(ctx)) }
		reader = cs
	default:
		if err := source.CheckWindow(ctx, s.source, from, rec.ResumesFromEmptyOplog()); err != nil {
			return nil, closeReader, err
		}
		tailer := source.NewTailer(s.source, from)
		tailer.SkipDatabases = []string{"local", "config", s.task.Checkpoint.Database}
		if s.srcProfile.OplogHasHoles {
			tailer.Settle = 2 * time.Second
			tailer.Log = s.baseLog
			s.log.Info("the source's oplog may show entries out of order: entries are applied once 2s old, and one that shows up later has its documents re-read from the source")
		}
		// Lag from the tailer's own reads: a query for the newest entry
		// would read the whole oplog again.
		tailer.NewestFromReads = s.srcProfile.OplogQueriesScan && tailer.Settle > 0
		reader = tailer
		s.tailer.Store(tailer)
	}
	return reader, closeReader, nil
}

// newStreamReplayer makes the replayer of a replica set's oplog (or a
// change stream), from the task's record and the target's profile.
func (s *replicaSetStreamer) newStreamReplayer(ctx context.Context, rec checkpoint.TaskRecord, from bson.Timestamp, reader source.OplogReader) (Replayer, error) {
	unique, selected, err := replayParams(ctx, s.source, s.mapper)
	if err != nil {
		return nil, err
	}
	store := s.store
	if l, ok := reader.(checkpoint.EntryLog); ok {
		store = store.WithEntries(l) // checked at resume: source.CheckRollback
	}
	r := s.newReplayer(replay.Options{
		Task: s.task.Name, Spec: &s.task.Spec, Reader: reader, Source: s.source, Target: s.target, Store: store,
		Mapper: s.mapper, Log: s.baseLog, From: from, OverlapUntil: rec.CopyEndTS,
		CheckpointInterval: s.checkpointInterval, ObserveWrite: s.observeReplay, UniqueIndexed: unique, Selected: selected,
		MaxWriteBatch: s.dstProfile.MaxWriteBatch, BulkWrite: s.dstProfile.BulkWriteCommand, WriteConcern: conn.WriteConcern(s.task.Target.URI), IndexesOneByOne: s.dstProfile.IndexesOneByOne, SerialUpdates: s.dstProfile.SerialUpdates,
		ReinsertReplacements: s.dstProfile.ReinsertReplacements,
		ShardKeys:            s.shardKeys(), TargetMajor: s.dstProfile.Major,
		Translator: oplog.Translator{
			WholeDocumentUpdates: s.srcProfile.UpdateShape == conn.UpdatesAsWholeDocument,
			PipelineUpdates:      s.dstProfile.PipelineUpdates,
		},
	})
	return r, nil
}

// watchCaughtUp ends replay (stop) once, with UntilCaughtUp, it has been
// caught up with a fresh read of the source for three looks a second
// apart; it closes caughtUp first.
func (s *replicaSetStreamer) watchCaughtUp(rctx context.Context, r Replayer, caughtUp chan struct{}, stop context.CancelFunc) {
	streak := 0
	for rctx.Err() == nil {
		time.Sleep(time.Second)
		if st := r.Status(); s.finish.untilCaughtUp() && st.CaughtUp() && s.finish.fresh(s.tailer.Load()) {
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
func replayParams(ctx context.Context, src *mongo.Client, mapper *catalog.Mapper) (unique map[string]bool, selected []catalog.Namespace, err error) {
	colls, err := catalog.List(ctx, src, mapper)
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

// driveCutover runs the cut-over's steps that need replay running:
// CatchingUp, BlockingWrites and Draining. It returns nil once replay has
// applied everything up to the drain position and may stop.
func (s *replicaSetStreamer) driveCutover(ctx context.Context, r Replayer) error {
	return s.cut.Drive(ctx, r, cutoverSource{s.source}, func() bool { return s.finish.fresh(s.tailer.Load()) })
}

// ReplayStatus is a snapshot of the replay this run started, nil before
// it starts.
func (s *replicaSetStreamer) ReplayStatus() *replay.Status {
	r := s.replayer.Load()
	if r == nil {
		return nil
	}
	rs := (*r).Status()
	return &rs
}

// OplogTailer is the oplog tailer replay reads, nil before it starts or
// when it reads a change stream or a scripted reader.
func (s *replicaSetStreamer) OplogTailer() *source.Tailer { return s.tailer.Load() }

// StreamAt is when replay started in this run, zero before.
func (s *replicaSetStreamer) StreamAt() time.Time {
	if at := s.streamAt.Load(); at != nil {
		return *at
	}
	return time.Time{}
}

// FinishWhenCaughtUp asks a streaming task to stop replay once everything
// the source wrote is applied, then verify and complete: the cut-over.
func (e *Engine) FinishWhenCaughtUp() { e.finish.ask() }

// finishRequest is how a run learns that replay should end once caught
// up: Options.UntilCaughtUp from the start, FinishWhenCaughtUp later, or a
// cut-over. The engine asks; the streamer (a replica set's, or a sharded
// source's subtasks through shardedsource.Run.UntilCaughtUp) reads it.
type finishRequest struct {
	until atomic.Bool
	// asked is when FinishWhenCaughtUp was called or a cut-over began
	// (UnixNano; 0 when not, or with UntilCaughtUp from the start): a
	// cut-over trusts only newest positions read after it.
	asked atomic.Int64
}

// newFinishRequest returns a request set from Options.UntilCaughtUp.
func newFinishRequest(untilCaughtUp bool) *finishRequest {
	f := &finishRequest{}
	f.until.Store(untilCaughtUp)
	return f
}

// ask asks a streaming run to stop replay once everything the source
// wrote is applied (FinishWhenCaughtUp).
func (f *finishRequest) ask() {
	f.began()
	f.until.Store(true)
}

// began notes that a cut-over began, unless a request was noted before.
func (f *finishRequest) began() { f.asked.CompareAndSwap(0, time.Now().UnixNano()) }

// untilCaughtUp reports whether replay ends once caught up.
func (f *finishRequest) untilCaughtUp() bool { return f.until.Load() }

// fresh reports whether the reader's newest position, which replay
// compares its checkpoint with, was read after the cut-over was asked
// for: a reader that answers from reads it runs at its own pace (a
// Settle-mode tailer) may hold an older answer, which could miss the last
// writes made before the cut-over.
func (f *finishRequest) fresh(t *source.Tailer) bool {
	asked := f.asked.Load()
	return t == nil || asked == 0 || !t.NewestReadAt().Before(time.Unix(0, asked))
}
