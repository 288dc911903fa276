package shardedsource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
)

// The Streaming phase of a sharded source: the subtasks started, watched
// every second, added and retired as config.shards changes.

// streamSharded runs the subtasks until ctx ends, one fails, or (with
// UntilCaughtUp) every running subtask has applied its shard's oplog to
// its end. It re-reads config.shards while running: a shard added gets a
// subtask from the first entry of its oplog, a removed shard's subtask
// reads its oplog to the end, then retires.
func (s *Source) streamSharded(ctx context.Context) error {
	unique, selected, err := s.run.ReplayParams(ctx)
	if err != nil {
		return err
	}
	params := replayParams{unique: unique, selected: selected}
	s.openBoard()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.run.WhileStreaming(ctx)
	failed := make(chan error, 1)
	start := func(st *subtask) error { return s.startSubtask(ctx, st, params, failed) }
	if err := s.recoverRemoved(ctx); err != nil {
		return err
	}
	if err := s.startShardedCutover(ctx); err != nil {
		return err
	}
	if err := s.undrain(ctx); err != nil {
		return err
	}
	for _, st := range s.subtaskList() {
		if s.mine(st.shard.Name) {
			if err := start(st); err != nil {
				return err
			}
		}
	}
	defer func() {
		cancel()
		for _, st := range s.subtaskList() {
			if st.done != nil {
				<-st.done
			}
		}
	}()
	return s.superviseShards(ctx, start, failed)
}

// openBoard makes the board the subtasks publish their positions on, on
// the first stream.
func (s *Source) openBoard() {
	if s.board == nil {
		s.board = board.NewMemoryBoard() // every subtask in this process
		if s.opts.Shard != "" {
			// One subtask per process: the positions meet in the
			// target's checkpoint database.
			s.board = board.NewTargetBoard(s.target, s.task.Checkpoint.Database, s.task.Name)
		}
	}
}

// startSubtask starts the replay of one shard from its record (a shard
// that joined without one starts at its first entry); a retired or
// drained shard is not replayed. A replay that fails reports on failed.
func (s *Source) startSubtask(ctx context.Context, st *subtask, params replayParams, failed chan<- error) error {
	rec, err := s.store.ShardRecord(ctx, st.shard.Name)
	if errors.Is(err, checkpoint.ErrNotFound) {
		// Joined the cluster after the start positions were taken
		// (while the task was stopped, or before config.shards was
		// re-read): everything it logged is new.
		s.log.Info("a shard without a start position joined the cluster: its subtask replays its oplog from the first entry", "shard", st.shard.Name)
		rec, err = s.store.SetShardStart(ctx, st.shard.Name, bson.Timestamp{})
	}
	if err != nil {
		return err
	}
	if rec.Retired {
		st.setPhase(SubtaskRetired, nil)
		return nil
	}
	if s.shardDrained(rec) {
		// Drained in the running cut-over: it replays no more.
		st.setCutover(rec.CutoverOf(s.cutoverAttempt()))
		st.setPhase(SubtaskStreaming, nil)
		return s.publishDrained(ctx, st.shard.Name, rec)
	}
	if err := checkShardWindow(ctx, st, rec); err != nil {
		return err
	}
	if err := s.publishStarts(ctx); err != nil {
		return err
	}
	sctx, scancel := context.WithCancel(ctx)
	st.cancel, st.done = scancel, make(chan struct{})
	r := replay.New(s.subtaskOptions(st, rec, params))
	st.replayer.Store(r)
	if st.retiring.Load() {
		st.setPhase(SubtaskRetiring, nil)
	} else {
		st.setPhase(SubtaskStreaming, nil)
	}
	s.log.Info("shard subtask replaying its oplog", "shard", st.shard.Name, "from", rec.ResumeTS())
	go func() {
		defer close(st.done)
		err := r.Run(sctx)
		if err != nil && sctx.Err() == nil {
			st.setPhase(SubtaskFailed, err)
			select {
			case failed <- fmt.Errorf("shard %s: %w", st.shard.Name, err):
			default:
			}
		}
	}()
	return nil
}

// superviseShards watches the running subtasks every second: it re-reads
// config.shards, retires drained shards, takes the cut-over a step
// further, and ends once every shard caught up (with UntilCaughtUp), the
// cut-over drained them, a subtask failed or ctx ends.
func (s *Source) superviseShards(ctx context.Context, start func(*subtask) error, failed <-chan error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastTopology := time.Now()
	streak := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-tick.C:
		}
		if time.Since(lastTopology) >= s.topologyInterval() {
			lastTopology = time.Now()
			if err := s.watchTopology(ctx, start); err != nil {
				s.log.Warn("config.shards not re-read; trying again", "err", err)
			}
		}
		if err := s.retireDrained(ctx); err != nil {
			return err
		}
		if s.task.Cutover.Requested || s.cutoverStep() != "" {
			// The cut-over decides when replay stops (cutover_sharded.go).
			if done, err := s.shardedCutoverTick(ctx); err != nil || done {
				return err
			}
		}
		if s.run.UntilCaughtUp() && !s.shardedCutoverRunning() && s.allCaughtUp() {
			streak++
		} else {
			streak = 0
		}
		if streak >= 3 {
			s.log.Info("every shard caught up with its oplog")
			return nil
		}
	}
}

func (s *Source) topologyInterval() time.Duration {
	if s.opts.TopologyInterval > 0 {
		return s.opts.TopologyInterval
	}
	return 10 * time.Second
}

// replayParams are what every subtask's replayer shares.
type replayParams struct {
	unique map[string]bool
	// selected are the selected source namespaces when replay starts.
	selected []catalog.Namespace
}

// subtaskOptions are the replay options of one shard's subtask.
func (s *Source) subtaskOptions(st *subtask, rec checkpoint.ShardRecord, p replayParams) replay.Options {
	from := rec.ResumeTS()
	var reader source.OplogReader
	if s.opts.ShardReader != nil {
		reader = s.opts.ShardReader(st.shard.Name, from)
	} else {
		tailer := source.NewTailer(st.client, from)
		tailer.SkipDatabases = []string{"local", "config", s.task.Checkpoint.Database}
		// The shards run the software the router does (the source's
		// profile).
		if s.srcProfile.OplogHasHoles {
			tailer.Settle = 2 * time.Second
		}
		reader = tailer
	}
	store := s.store.ForShard(st.shard.Name)
	if l, ok := reader.(checkpoint.EntryLog); ok {
		store = store.WithEntries(l) // checked at resume: checkShardWindow
	}
	if s.task.Incremental.IDReuseAcrossShards == config.IDReuseHold {
		s.log.Info("incremental.idReuseAcrossShards: hold is no longer needed and replays as detect does: "+
			"every write is filtered on its document key and only a write that meets another document with its _id waits",
			"shard", st.shard.Name)
	}
	return replay.Options{
		Task: s.task.Name, Spec: &s.task.Spec, Reader: reader,
		// Documents re-read for late entries come from mongos: a shard
		// may no longer own them.
		Source: s.source, Target: s.target, Store: store,
		// A multi-shard transaction part waiting for the others is saved
		// with the checkpoint, and recovered with it.
		Recover: oplog.AssemblerState{Entries: rec.Txns},
		SaveState: func(ctx context.Context, ts bson.Timestamp, txns oplog.AssemblerState) error {
			return store.SaveShardState(ctx, ts, txns.Entries)
		},
		Mapper: s.mapper, Log: s.baseLog.With("shard", st.shard.Name), From: from, OverlapUntil: rec.CopyEndTS,
		CheckpointInterval: s.opts.CheckpointInterval, ObserveWrite: s.opts.ObserveReplay, UniqueIndexed: p.unique, Selected: p.selected,
		MaxWriteBatch: s.dstProfile.MaxWriteBatch, BulkWrite: s.dstProfile.BulkWriteCommand, WriteConcern: conn.WriteConcern(s.task.Target.URI), IndexesOneByOne: s.dstProfile.IndexesOneByOne, SerialUpdates: s.dstProfile.SerialUpdates,
		ReinsertReplacements: s.dstProfile.ReinsertReplacements,
		ShardKeys:            s.run.ShardKeys(), TargetMajor: s.dstProfile.Major,
		// The source's shard keys, through its mongos, for inserts logged
		// without their document key (before FCV 5.3).
		SourceShardKeys: replay.TargetShardKeys{Router: s.source},
		Translator: oplog.Translator{
			WholeDocumentUpdates: s.srcProfile.UpdateShape == conn.UpdatesAsWholeDocument,
			PipelineUpdates:      s.dstProfile.PipelineUpdates,
		},
		// Chunk migrations (fromMigrate entries) are skipped, and writes
		// after one wait on the board until the other subtasks have
		// applied up to it (replay/shard.go).
		ShardMember: true,
		Shard:       st.shard.Name,
		Board:       s.board,
	}
}

// watchTopology re-reads config.shards: added shards get a subtask from
// the first entry of their oplog, removed ones start retiring.
func (s *Source) watchTopology(ctx context.Context, start func(*subtask) error) error {
	shards, err := topology.ReadShards(ctx, s.source, s.task.Source.Shards)
	if err != nil {
		return err
	}
	var known []topology.Shard
	for _, st := range s.subtaskList() {
		known = append(known, st.shard)
	}
	added, removed := topology.Diff(known, shards)
	for _, sh := range added {
		s.log.Info("a shard joined the cluster: its subtask replays its oplog from the first entry", "shard", sh.Name)
		if err := s.addShard(ctx, sh); err != nil {
			return err
		}
		if !s.mine(sh.Name) {
			continue
		}
		if _, err := s.store.SetShardStart(ctx, sh.Name, bson.Timestamp{}); err != nil {
			return err
		}
		s.subMu.Lock()
		st := s.subtasks[sh.Name]
		s.subMu.Unlock()
		if err := start(st); err != nil {
			return err
		}
	}
	for _, sh := range removed {
		s.subMu.Lock()
		st := s.subtasks[sh.Name]
		s.subMu.Unlock()
		st.mu.Lock()
		retired := st.phase == SubtaskRetired
		st.mu.Unlock()
		if st.retiring.CompareAndSwap(false, true) && s.mine(sh.Name) && !retired {
			s.log.Info("a shard left the cluster: its subtask reads its oplog to the end, then retires", "shard", sh.Name)
			st.setPhase(SubtaskRetiring, nil)
		}
	}
	return nil
}

// retireDrained stops the subtasks of removed shards once they applied
// their shard's oplog to its end, and records them as retired.
func (s *Source) retireDrained(ctx context.Context) error {
	for _, st := range s.subtaskList() {
		if !st.retiring.Load() || !s.mine(st.shard.Name) {
			continue
		}
		st.mu.Lock()
		phase := st.phase
		st.mu.Unlock()
		r := st.replayer.Load()
		if phase != SubtaskRetiring || r == nil || !r.Status().CaughtUp() {
			continue
		}
		st.cancel()
		<-st.done
		if err := s.store.RetireShard(ctx, st.shard.Name); err != nil {
			return err
		}
		// Nobody waits for a retired shard any more: its oplog is applied
		// to its end and the cluster writes nothing there.
		rs := r.Status()
		if err := s.board.Publish(ctx, board.Position{Shard: st.shard.Name, Read: rs.ReadTS, Applied: rs.AppliedTS, Retired: true}); err != nil {
			return err
		}
		st.setPhase(SubtaskRetired, nil)
		s.log.Info("shard subtask retired: the removed shard's oplog is applied to its end", "shard", st.shard.Name, "ts", r.Status().AppliedTS)
	}
	return nil
}

// allCaughtUp reports whether every subtask of this process that still
// streams has applied everything its shard logged.
func (s *Source) allCaughtUp() bool {
	running := false
	for _, st := range s.subtaskList() {
		if !s.mine(st.shard.Name) {
			continue
		}
		st.mu.Lock()
		phase := st.phase
		st.mu.Unlock()
		if phase == SubtaskRetired {
			continue
		}
		r := st.replayer.Load()
		if r == nil || !r.Status().CaughtUp() {
			return false
		}
		running = true
	}
	return running
}

// recoverRemoved finds shards that left the cluster while the task was
// stopped, before their subtask retired: their oplog may hold writes not
// applied yet. A shard named in source.shards[] is read to its end and
// retired; without an address the task stops rather than lose them.
func (s *Source) recoverRemoved(ctx context.Context) error {
	if !s.copyLeader() {
		return nil // the worker of the first shard does it
	}
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		rec := recs[name]
		s.subMu.Lock()
		_, known := s.subtasks[name]
		s.subMu.Unlock()
		if known || rec.Retired {
			continue
		}
		i := slices.IndexFunc(s.task.Source.Shards, func(s config.Shard) bool { return s.Name == name })
		if s.opts.Shard != "" {
			return fmt.Errorf("shard %s left the cluster while the task was stopped, and its oplog may hold writes after the checkpoint %d,%d that are not applied yet: "+
				"run the task once without --shard (with the shard's address in source.shards[]) so that it is read to its end, or resync the task", name, rec.ResumeTS().T, rec.ResumeTS().I)
		}
		if i < 0 {
			return fmt.Errorf("shard %s left the cluster while the task was stopped, and its oplog may hold writes after the checkpoint %d,%d that are not applied yet: "+
				"give its address in source.shards[] (name: %s) so that it is read to its end, or resync the task", name, rec.ResumeTS().T, rec.ResumeTS().I, name)
		}
		if err := s.addShard(ctx, topology.Shard{Name: name, URI: s.task.Source.Shards[i].URI, Overridden: true}); err != nil {
			return err
		}
		s.subMu.Lock()
		st := s.subtasks[name]
		s.subMu.Unlock()
		st.retiring.Store(true)
		s.log.Info("a shard left the cluster while the task was stopped: its subtask reads its oplog to the end, then retires", "shard", name)
	}
	return nil
}

// publishStarts puts the saved position of every shard that has none on
// the board yet, before a subtask starts: a shard that has not published
// holds nobody back, so a subtask must not run while another shard's
// position is missing (its worker not started yet, or a shard just added).
// A position already published is left alone: it is at least as new.
func (s *Source) publishStarts(ctx context.Context) error {
	known, err := s.board.Positions(ctx)
	if err != nil {
		return err
	}
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if slices.ContainsFunc(known, func(p board.Position) bool { return p.Shard == rec.Shard }) {
			continue
		}
		p := board.Position{Shard: rec.Shard, Read: rec.ResumeTS(), Applied: rec.ResumeTS(), Retired: rec.Retired}
		if err := s.board.Publish(ctx, p); err != nil {
			return err
		}
	}
	return nil
}
