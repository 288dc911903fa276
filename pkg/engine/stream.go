package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// replicaSetStreamer reads a replica set's oplog (or a change stream,
// through mongos too) in one replay (Stream). It owns the replay's
// state and knows the engine only through its fields: the engine's parts,
// its options, and what it needs of the run as functions.
type replicaSetStreamer struct {
	task *config.Task
	// shard is Options.Shard.
	shard string
	// log names the task; baseLog does not (for the replayer, which adds
	// it itself).
	log, baseLog *slog.Logger
	endpoints
	// cut is the task's cut-over, which drives replay once it runs.
	cut *cutover.Machine
	// finish says when replay ends once caught up (shared with the
	// engine, which asks).
	finish *finishRequest
	// newReplayer makes the replayer (newReplayer; tests give fakes).
	newReplayer func(replay.Options) Replayer
	// reader, Options.Reader, replaces the oplog tailer (tests).
	reader func(from bson.Timestamp) source.OplogReader
	// checkpointInterval and observeReplay are Options'.
	checkpointInterval time.Duration
	observeReplay      func(op string, d time.Duration)
	// whileStreaming runs the streaming verification while replay runs,
	// until ctx ends; shardKeys is what replay needs to know of a sharded
	// target (targetSharding.replayShardKeys).
	whileStreaming func(ctx context.Context)
	shardKeys      func() replay.ShardKeys

	replayer atomic.Pointer[Replayer]
	tailer   atomic.Pointer[source.Tailer]
	// streamAt is when replay started in this run.
	streamAt atomic.Pointer[time.Time]
}

func (*replicaSetStreamer) Follows() bool { return false }

// partial: a worker given a shard (Options.Shard) over a sharded source
// read through mongos (mode full, change streams) still leaves the
// task-wide steps to the run that sees every shard.
func (s *replicaSetStreamer) Partial() bool { return s.shard != "" }

func (s *replicaSetStreamer) CheckOplogs(ctx context.Context, what string) error {
	ok, err := source.HasOplog(ctx, s.source)
	if err != nil || ok {
		return err
	}
	return source.NoOplogError(what, "the source")
}

func (s *replicaSetStreamer) CheckWindow(ctx context.Context, prev checkpoint.TaskRecord) error {
	if err := source.CheckWindow(ctx, s.source, prev.ResumeTS(), prev.ResumesFromEmptyOplog()); err != nil {
		return err
	}
	if prev.AppliedEntry == nil || prev.AppliedTS.IsZero() {
		return nil // nothing applied yet, or a checkpoint saved without its entry
	}
	return source.CheckRollback(ctx, s.source, *prev.AppliedEntry)
}

func (s *replicaSetStreamer) CheckGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	if useOplog && s.reader == nil {
		if err := source.CheckWindow(ctx, s.source, ts, false); err != nil {
			return nil, fmt.Errorf("incremental.startAt %s: %w", s.task.Incremental.StartAt, err)
		}
	}
	return nil, nil
}

func (s *replicaSetStreamer) NewestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error) {
	if ts, empty, err = s.positionOf(useOplog)(ctx, s.source); err != nil {
		err = fmt.Errorf("the source's replay start position: %w", err)
	}
	return ts, empty, nil, err
}

func (*replicaSetStreamer) RecordStarts(_ context.Context, ts bson.Timestamp, _ map[string]bson.Timestamp) (bson.Timestamp, error) {
	return ts, nil
}

func (s *replicaSetStreamer) CopyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error) {
	if useOplog && s.srcProfile.OplogQueriesScan {
		return copyEndByClock(ctx, s.source)
	}
	endTS, _, err := s.positionOf(useOplog)(ctx, s.source)
	if err != nil {
		err = fmt.Errorf("the source's position at the end of the copy: %w", err)
	}
	return endTS, err
}

func (s *replicaSetStreamer) OplogSides(ctx context.Context) ([]source.OplogSide, error) {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return nil, err
	}
	return []source.OplogSide{{Client: s.source, From: rec.ResumeTS(), SinceEmpty: rec.ResumesFromEmptyOplog(), ByClock: s.srcProfile.OplogQueriesScan}}, nil
}

func (*replicaSetStreamer) ShardStatuses() []ShardStatus { return nil }

func (s *replicaSetStreamer) CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); c.SourceTS.IsZero() || at.Compare(c.SourceTS) < 0 {
		return fmt.Errorf("cut-over: the checkpoint %d,%d is below the drain position %d,%d", at.T, at.I, c.SourceTS.T, c.SourceTS.I)
	}
	return nil
}

func (s *replicaSetStreamer) NewestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
	drained := c.SourceTS
	if newest, err := source.NewestTS(ctx, s.source); err == nil && newest.Compare(drained) > 0 {
		return "", drained, newest, true
	}
	return "", bson.Timestamp{}, bson.Timestamp{}, false
}

// positionOf returns how the source's current position is read: its
// newest oplog entry, or its clock where reading the newest entry would
// read the whole oplog, or its cluster time for change streams.
func (s *replicaSetStreamer) positionOf(useOplog bool) func(context.Context, *mongo.Client) (bson.Timestamp, bool, error) {
	switch {
	case !useOplog:
		return func(ctx context.Context, c *mongo.Client) (bson.Timestamp, bool, error) {
			ts, err := source.ClusterTime(ctx, c)
			return ts, false, err
		}
	case s.srcProfile.OplogQueriesScan:
		// Reading the newest entry would read the whole oplog.
		return source.StartPositionByClock
	}
	return source.StartPosition
}

// copyEndByClock is the copy's end position on a source where reading
// the newest oplog entry reads the whole oplog (conn.Profile's
// OplogQueriesScan; seconds on FerretDB with a busy oplog): the start of
// the next second by the server's clock, above every entry written
// before the call. The copy's end only bounds the copy/replay overlap
// (replay.Options.OverlapUntil: how long a duplicate key on a unique
// secondary index is tolerated), never where replay starts, so an upper
// bound serves; it tolerates such a duplicate at most a second longer.
// The start position on such a source is the start of a second too, read
// within milliseconds of it (source.StartPositionByClock).
func copyEndByClock(ctx context.Context, c *mongo.Client) (bson.Timestamp, error) {
	ts, err := source.ServerTime(ctx, c)
	if err != nil {
		return bson.Timestamp{}, err
	}
	return bson.Timestamp{T: ts.T + 1}, nil
}

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
