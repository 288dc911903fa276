package shardedsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// ErrUnknownShard means Options.Shard names no shard of the source.
var ErrUnknownShard = errors.New("unknown shard")

// Source supervises a sharded source read shard by shard: its subtasks
// and their lifecycle (sharded_stream.go), the shard order and the board
// they publish their positions on, the per-shard copy and its leadership
// (pershard.go), the cut-over as the subtasks follow it
// (cutover_sharded.go, shardworker.go) and shards added or removed. It
// is the engine's streamer for such a source (streamer_sharded.go). It
// owns its state and knows the engine only through Config: its parts,
// and what it needs of the task's run as functions (Run).
type Source struct {
	task *config.Task
	opts Options
	// log names the task; baseLog does not (for the replayers, which add
	// it themselves).
	log, baseLog   *slog.Logger
	source, target *mongo.Client
	// profiles of the source and target servers (the shards run the
	// software the router does).
	srcProfile, dstProfile conn.Profile
	store                  *checkpoint.Store
	mapper                 *catalog.Mapper
	// cut is the task's cut-over, which the subtasks follow.
	cut *cutover.Machine
	run Run

	subMu      sync.Mutex
	subtasks   map[string]*subtask
	shardOrder []string // shard names, sorted
	// board is where the subtasks publish their positions (replay holds
	// writes after chunk migrations on it): in memory when this process
	// runs every subtask, in the target's checkpoint database otherwise.
	board board.Board
	// perShard is the per-shard copy (pershard.go), nil when the copy
	// reads through mongos.
	perShard *perShardCopy
	// sharesCopy says the copy's ranges read through mongos are leased,
	// shared with the other shard workers (ShareCopy).
	sharesCopy bool
}

// Config is what New is given: the task, the engine's options and parts,
// and what the supervision needs of the task's run.
type Config struct {
	Task    *config.Task
	Options Options
	// Log names the task; BaseLog does not (for the replayers, which add
	// it themselves).
	Log, BaseLog   *slog.Logger
	Source, Target *mongo.Client
	// SourceProfile and TargetProfile are the servers' profiles (the
	// shards run the software the router does).
	SourceProfile, TargetProfile conn.Profile
	Store                        *checkpoint.Store
	Mapper                       *catalog.Mapper
	// Cutover is the task's cut-over, which the subtasks follow.
	Cutover *cutover.Machine
	Run     Run
}

// Options are the engine's options the supervision reads (engine.Options
// documents them).
type Options struct {
	// Shard, when set, is the one shard whose subtask this process runs.
	Shard string
	// ShardReader, when set, replaces each shard's oplog tailer (tests).
	ShardReader func(shard string, from bson.Timestamp) source.OplogReader
	// TopologyInterval is how often config.shards is re-read while
	// streaming; 10s when zero.
	TopologyInterval   time.Duration
	CheckpointInterval time.Duration
	ObserveReplay      func(op string, d time.Duration)
	ObserveWrite       func(time.Duration)
}

// Run is what the supervision needs of the task's run, as functions.
type Run struct {
	// UntilCaughtUp reports whether streaming ends once every shard
	// caught up (engine.Options.UntilCaughtUp, FinishWhenCaughtUp).
	UntilCaughtUp func() bool
	// SetPhase records the phase this process is in.
	SetPhase func(workerapi.Phase)
	// TakeLease takes the task's lease (a worker that follows).
	TakeLease func() error
	// WhileStreaming runs the streaming verification while the subtasks
	// replay, until ctx ends.
	WhileStreaming func(ctx context.Context)
	// ReplayParams reads what every replayer of the task shares: the
	// selected source namespaces, and the target namespaces with a
	// unique secondary index.
	ReplayParams func(ctx context.Context) (unique map[string]bool, selected []catalog.Namespace, err error)
	// ShardKeys is what replay needs to know of a sharded target.
	ShardKeys func() replay.ShardKeys
	// HelpCopy copies the ranges read through mongos it can claim
	// (the copier's HelpCopy); Copied counts documents this process
	// wrote for a per-shard copy another worker leads (its Copied).
	HelpCopy func(ctx context.Context) (int, error)
	Copied   func(ns, target string, docs, bytes int64)
}

// New returns the supervision of a sharded source, not connected yet
// (Open).
func New(c Config) *Source {
	return &Source{task: c.Task, opts: c.Options, log: c.Log, baseLog: c.BaseLog, source: c.Source, target: c.Target,
		srcProfile: c.SourceProfile, dstProfile: c.TargetProfile, store: c.Store, mapper: c.Mapper, cut: c.Cutover, run: c.Run}
}

// ShardCount is how many shards the source has, as far as this process
// knows.
func (s *Source) ShardCount() int { return len(s.subtaskList()) }

// PerShardCopy makes the per-shard copy, the full copy's
// fullsync.Options.PerShard; nil when the task copies through mongos.
func (s *Source) PerShardCopy() (fullsync.PerShard, error) {
	p, err := s.newPerShardCopy()
	if err != nil || p == nil {
		return nil, err
	}
	s.perShard = p
	return p, nil
}

// ShareCopy says whether the copy's ranges read through mongos are
// leased, shared with the other shard workers: a worker that follows
// helps with them while it waits for the copy's end.
func (s *Source) ShareCopy(leased bool) { s.sharesCopy = leased }

// Open discovers a sharded source and connects to its shards; sharded
// reports whether it is read shard by shard. A task that only copies
// (mode full) or reads a change stream through mongos needs no shard
// connections. On an error, Clients lists the shards it connected to.
func (s *Source) Open(ctx context.Context) (sharded bool, err error) {
	sharded, shards, err := topology.Discover(ctx, s.source, s.task.Source)
	if err != nil {
		return false, err
	}
	if !sharded {
		if s.opts.Shard != "" {
			return false, fmt.Errorf("--shard %s: the source is not a sharded cluster (hello names no mongos and source.kind is %s): run without --shard", s.opts.Shard, s.task.Source.Kind)
		}
		return false, nil
	}
	if s.task.Mode == config.ModeFull || s.task.Incremental.Method == config.MethodChangeStream {
		s.log.Info("sharded source: copied (and changes read) through mongos", "shards", len(shards))
		return false, nil
	}
	if s.opts.Shard != "" && !slices.ContainsFunc(shards, func(sh topology.Shard) bool { return sh.Name == s.opts.Shard }) {
		return false, fmt.Errorf("--shard %s: %w: config.shards lists %s", s.opts.Shard, ErrUnknownShard, shardNames(shards))
	}
	s.subtasks = map[string]*subtask{}
	for _, sh := range shards {
		if err := s.addShard(ctx, sh); err != nil {
			return false, err
		}
	}
	s.log.Info("sharded source: one replay subtask per shard", "shards", shardNames(shards), "shard", s.opts.Shard)
	if msg := orphanWritesWarning(s.srcProfile); msg != "" {
		s.log.Warn(msg)
	}
	return true, nil
}

// orphanWritesWarning names, for a source before MongoDB 6.0, the writes
// its shards apply to orphan documents and log like any other, which a
// shard's replay cannot tell from the live document's (docs/sharded.md,
// "Writes to orphans, sources before 6.0"), and what keeps a sync exact.
// It is empty from 6.0 on, where shards filter orphans out of every write
// (PreWriteFilter), and on servers whose version is unknown.
func orphanWritesWarning(p conn.Profile) string {
	if p.Flavor != conn.FlavorMongoDB || p.Major == 0 || p.Major >= 6 {
		return ""
	}
	return fmt.Sprintf("the source cluster runs MongoDB %s: before 6.0, an update or delete that mongos sends to more than one shard outside a transaction "+
		"(a multi-update or multi-delete whose filter does not name the shard key, or an update or delete by _id alone) is applied to orphans too, "+
		"the documents a chunk migration leaves on a shard until its range deleter runs (orphanCleanupDelaySecs after the commit), "+
		"and each shard logs it like any write. The replay cannot tell those entries from the live document's, so such a document can end "+
		"different on the target (docs/sharded.md, \"Writes to orphans, sources before 6.0\"). To keep the sync exact, send those writes "+
		"with the shard key or in a transaction, or upgrade the source to 6.0; verify.continuous: true finds a document that differs while the task streams",
		p.Version)
}

// addShard connects to a shard and registers its (not yet running)
// subtask.
func (s *Source) addShard(ctx context.Context, sh topology.Shard) error {
	c, err := topology.Open(ctx, s.task.Source, sh)
	if err != nil {
		return err
	}
	if err := checkNotTarget(ctx, c, s.target, sh.Name); err != nil {
		_ = c.Disconnect(context.Background())
		return err
	}
	st := &subtask{shard: sh, client: c, phase: SubtaskPending, since: time.Now()}
	s.subMu.Lock()
	s.subtasks[sh.Name] = st
	s.shardOrder = append(s.shardOrder, sh.Name)
	slices.Sort(s.shardOrder)
	s.subMu.Unlock()
	return nil
}

// copyLeader reports whether this process runs the full copy and records
// the start positions: always in `ferry run`; in workers running one shard
// each, the worker of the shard whose name sorts first.
func (s *Source) copyLeader() bool {
	if s.opts.Shard == "" {
		return true
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	return len(s.shardOrder) > 0 && s.shardOrder[0] == s.opts.Shard
}

// mine reports whether this process runs the subtask of shard name.
func (s *Source) mine(name string) bool { return s.opts.Shard == "" || s.opts.Shard == name }

func (s *Source) subtaskList() []*subtask {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	out := make([]*subtask, 0, len(s.shardOrder))
	for _, n := range s.shardOrder {
		out = append(out, s.subtasks[n])
	}
	return out
}

// Clients are the shards' connections, for the engine to close.
func (s *Source) Clients() []*mongo.Client {
	var out []*mongo.Client
	for _, st := range s.subtaskList() {
		out = append(out, st.client)
	}
	return out
}

// checkShardWindows fails with OplogWindowLost, naming the shard, when a
// shard's oplog no longer holds its subtask's checkpoint, or with
// source.ErrRolledBack when it no longer holds the entry the checkpoint
// was saved at.
func (s *Source) checkShardWindows(ctx context.Context, recs map[string]checkpoint.ShardRecord) error {
	for _, st := range s.subtaskList() {
		rec, ok := recs[st.shard.Name]
		if !ok || rec.Retired || !s.mine(st.shard.Name) {
			continue
		}
		if err := checkShardWindow(ctx, st, rec); err != nil {
			return err
		}
	}
	return nil
}

func checkShardWindow(ctx context.Context, st *subtask, rec checkpoint.ShardRecord) error {
	from := rec.ResumeTS()
	if from.IsZero() {
		return nil // a shard added later: its whole oplog is read
	}
	if err := source.CheckWindow(ctx, st.client, from, false); err != nil {
		return fmt.Errorf("shard %s: %w", st.shard.Name, err)
	}
	if rec.AppliedEntry != nil && !rec.AppliedTS.IsZero() {
		if err := source.CheckRollback(ctx, st.client, *rec.AppliedEntry); err != nil {
			return fmt.Errorf("shard %s: %w", st.shard.Name, err)
		}
	}
	return nil
}

// shardPositions reads the newest majority-committed oplog position of
// every shard (source.CommittedTS): the start positions, taken before
// anything is copied, which reads at majority read concern.
func (s *Source) shardPositions(ctx context.Context) (map[string]bson.Timestamp, error) {
	out := map[string]bson.Timestamp{}
	for _, st := range s.subtaskList() {
		ts, err := source.CommittedTS(ctx, st.client)
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", st.shard.Name, err)
		}
		out[st.shard.Name] = ts
	}
	return out, nil
}

// recordShardStarts stores the start positions (existing ones are kept)
// and returns the lowest, the task's start.
func (s *Source) recordShardStarts(ctx context.Context, starts map[string]bson.Timestamp) (bson.Timestamp, error) {
	var low bson.Timestamp
	first := true
	for _, name := range slices.Sorted(maps.Keys(starts)) {
		rec, err := s.store.SetShardStart(ctx, name, starts[name])
		if err != nil {
			return low, err
		}
		s.log.Info("recorded the shard's replay start position", "shard", name, "ts", rec.StartTS)
		if first || rec.StartTS.Compare(low) < 0 {
			low, first = rec.StartTS, false
		}
	}
	return low, nil
}

// recordShardCopyEnd stores every shard's newest position once the copy
// is done.
func (s *Source) recordShardCopyEnd(ctx context.Context) (bson.Timestamp, error) {
	ends, err := s.shardPositions(ctx)
	if err != nil {
		return bson.Timestamp{}, err
	}
	var high bson.Timestamp
	for name, ts := range ends {
		if err := s.store.SetShardCopyEnd(ctx, name, ts); err != nil {
			return high, err
		}
		if ts.Compare(high) > 0 {
			high = ts
		}
	}
	return high, nil
}

// checkNotTarget refuses a shard that is the target deployment.
func checkNotTarget(ctx context.Context, shard, target *mongo.Client, name string) error {
	return wrapShard(name, conn.CheckDistinct(ctx, shard, target))
}

func wrapShard(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("source.shards[%s]: %w", name, err)
}

func shardNames(shards []topology.Shard) string {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}
