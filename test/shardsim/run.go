package shardsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// Config is how a schedule is run.
type Config struct {
	// Seed picks delivery speeds and kills.
	Seed uint64
	// Kills is the most subtask kills and restarts.
	Kills int
	// Target, when set, receives the writes too (a real server).
	Target *mongo.Client
	// Sharded, when set, makes the target a sharded cluster: the
	// collection is pre-split by the task's plan, whose chunks must
	// cover the key space, and every write must be one its mongos
	// routes (see Target).
	Sharded *Target
	// Unkeyed keeps the replayer from learning the target's shard keys,
	// to show that the target model refuses what mongos refuses.
	Unkeyed bool
	// Timeout is how long the run may go without any subtask making
	// progress (a change of its read or applied position, of its writes
	// in flight or of its holds) before it counts as stuck; 10s when zero.
	// A run that progresses is stopped only after 60 times as long, so a
	// loaded machine slows a run down but never fails it.
	Timeout time.Duration
	// Speeds, when set, are the entries per round each shard's reader is
	// given (by shard name; 0 stops it); otherwise the seed picks them,
	// one reader far ahead and one far behind.
	Speeds map[string]int
	// Round is the delivery period; 1ms when zero.
	Round time.Duration
	// Recorder, when set, is the target to use (a scenario keeps it to
	// look at it during the run).
	Recorder *Recorder
	// Step, when set, is called after every round with the board; the
	// scenarios use it to look at positions while the run goes on.
	Step func(round int, board *board.MemoryBoard, rec *Recorder) bool
	// Kill, when set, is called after every round: the shard it names
	// (none when empty) is killed and restarted from its saved checkpoint,
	// as the seeded kills are.
	Kill func(round int) string
	// CheckpointInterval is the subtasks' checkpoint period; 2ms when
	// zero (a long one keeps the saved checkpoint far behind).
	CheckpointInterval time.Duration
	// From, when set, are the shards' start positions (a schedule with a
	// copy phase: the target holds the copy's documents and replay starts
	// after them); otherwise every shard replays from its first entry.
	From map[string]bson.Timestamp
}

// feed is one shard's oplog as its readers see it: the first visible
// entries.
type feed struct {
	mu      sync.Mutex
	log     []bson.Raw
	visible int
}

func (f *feed) show(n int) {
	f.mu.Lock()
	f.visible = min(len(f.log), f.visible+n)
	f.mu.Unlock()
}

func (f *feed) done() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.visible == len(f.log)
}

func tsOf(raw bson.Raw) bson.Timestamp {
	t, i := raw.Lookup("ts").Timestamp()
	return bson.Timestamp{T: t, I: i}
}

// reader is a source.OplogReader of a feed, after a position.
type reader struct {
	f    *feed
	from bson.Timestamp
	next int
}

func (r *reader) Next(ctx context.Context) ([]bson.Raw, error) {
	r.f.mu.Lock()
	var out []bson.Raw
	for ; r.next < r.f.visible && len(out) < 16; r.next++ {
		if e := r.f.log[r.next]; tsOf(e).After(r.from) {
			out = append(out, e)
		}
	}
	r.f.mu.Unlock()
	if len(out) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return out, nil
}

func (r *reader) Newest(context.Context) (bson.Timestamp, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.f.visible == 0 {
		return bson.Timestamp{}, nil
	}
	return tsOf(r.f.log[r.f.visible-1]), nil
}

// fence drops the publications of a killed subtask: a SIGKILLed process
// publishes nothing more.
type fence struct {
	mu     sync.Mutex
	board  board.Board
	closed bool
}

func (f *fence) Publish(ctx context.Context, p board.Position) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	return f.board.Publish(ctx, p)
}

func (f *fence) Positions(ctx context.Context) ([]board.Position, error) {
	return f.board.Positions(ctx)
}

func (f *fence) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// subtask is one running Replayer.
type subtask struct {
	name   string
	inst   int
	r      *replay.Replayer
	fence  *fence
	killed *atomic.Bool
	cancel context.CancelFunc
	done   chan error
}

// runner runs one schedule.
type runner struct {
	sc     Schedule
	cfg    Config
	board  *board.MemoryBoard
	rec    *Recorder
	feeds  map[string]*feed
	subs   map[string]*subtask
	spec   config.Spec
	mapper *catalog.Mapper
	insts  int
	failed atomic.Value // error: a subtask that stopped on its own
	// saved are the subtasks' checkpoints as saved (what a restart reads).
	mu    sync.Mutex
	saved map[string]saved
}

// saved is a subtask's checkpoint as saved: the position and the
// transactions to recover with it.
type saved struct {
	ts   bson.Timestamp
	txns oplog.AssemblerState
}

// Result is what a run found.
type Result struct {
	// Violations are the checks that failed (none when the target equals
	// the model and every write arrived in order, once).
	Violations []string
	// Holds are each shard's last subtask's hold figures.
	Holds map[string]replay.HoldStatus
	// Stopped is the error the run stopped with at the schedule's Stop,
	// as a user reads it.
	Stopped string
	// Target is what a sharded target counted (Config.Sharded).
	Target TargetStats
}

// Run replays the schedule's oplogs through one subtask per shard and
// checks the writes and the final documents.
func Run(ctx context.Context, sc Schedule, cfg Config) (Result, error) {
	rn, err := run(ctx, sc, cfg)
	res := Result{Violations: rn.rec.Errors(), Holds: map[string]replay.HoldStatus{}}
	for name, sub := range rn.subs {
		res.Holds[name] = sub.r.Status().Holds
	}
	if sc.Stop != nil {
		res, err = res.stopped(sc, rn.rec, err)
	} else if err == nil {
		res.Violations = rn.rec.Check()
	}
	if cfg.Sharded != nil {
		res.Target = cfg.Sharded.Stats()
		if st := res.Target; st.WithKey+st.GoneByID != st.Writes-st.Inserts {
			res.Violations = append(res.Violations, fmt.Sprintf("target %s: %d of %d updates, replacements and deletes without the whole shard key in their filter",
				cfg.Sharded.Describe(), st.Writes-st.Inserts-st.WithKey-st.GoneByID, st.Writes-st.Inserts))
		}
	}
	return res, err
}

// stopped checks a run of a schedule with a Stop: it must end with
// ErrTopologyChange naming the operation and the namespace, with every
// write applied in order and none from after a shard's stop entry.
func (res Result) stopped(sc Schedule, rec *Recorder, err error) (Result, error) {
	st := sc.Stop
	if err == nil {
		return res, fmt.Errorf("the run did not stop at %s on %s", st.Op, st.NS)
	}
	if !errors.Is(err, replay.ErrTopologyChange) {
		return res, err
	}
	msg := err.Error()
	if !strings.Contains(msg, st.Op+" on "+st.NS+":") || !strings.Contains(msg, "namespaces.exclude") {
		res.Violations = append(res.Violations, "the stop does not name the operation, the namespace and what to do: "+msg)
	}
	for name, ts := range st.At {
		if n := rec.AppliedFrom(name, ts); n > 0 {
			res.Violations = append(res.Violations, fmt.Sprintf("shard %s: %d writes applied from after its %s entry at %v", name, n, st.Op, ts))
		}
	}
	res.Stopped = msg
	return res, nil
}

// run plays the schedule: it starts a replayer per shard, then feeds the
// shards' oplogs round by round with kills and restarts, until every
// subtask has applied its last entry or none makes progress.
//
//nolint:funlen,gocyclo // the simulation's loop is test-bed code, read as one story
func run(ctx context.Context, sc Schedule, cfg Config) (*runner, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Round == 0 {
		cfg.Round = time.Millisecond
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = 2 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, 60*cfg.Timeout)
	defer cancel()
	rn := &runner{sc: sc, cfg: cfg, board: board.NewMemoryBoard(), rec: NewRecorder(sc.Model), feeds: map[string]*feed{}, subs: map[string]*subtask{},
		saved: map[string]saved{}}
	for name, ts := range cfg.From {
		rn.saved[name] = saved{ts: ts}
	}
	if cfg.Recorder != nil {
		rn.rec = cfg.Recorder
	}
	if cfg.Sharded != nil {
		errs := cfg.Sharded.Prepare(sc.Model)
		rn.rec.mu.Lock()
		rn.rec.target = cfg.Sharded
		for _, e := range errs {
			rn.rec.failf("%s", e)
		}
		rn.rec.mu.Unlock()
	}
	rn.spec = config.Spec{Threads: config.Threads{Writers: 2}, Cache: config.Cache{BatchSize: 8},
		Namespaces: config.Namespaces{Exclude: []string{`other\..*`}}}
	rn.spec.SetDefaults()
	mapper, err := catalog.NewMapper(rn.spec.Namespaces, rn.spec.Checkpoint.Database)
	if err != nil {
		return rn, err
	}
	rn.mapper = mapper
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xfeed))
	speeds := map[string]int{}
	for _, s := range sc.Model.Shards {
		rn.feeds[s.Name] = &feed{log: s.Log}
		speeds[s.Name] = 1 + rng.IntN(3)
	}
	if cfg.Speeds != nil {
		speeds = cfg.Speeds
	} else {
		names := shardNames(sc.Model)
		speeds[names[rng.IntN(len(names))]] = 1000 // far ahead
		if rng.IntN(2) == 0 {
			speeds[names[rng.IntN(len(names))]] = 0 // far behind: one entry every 8 rounds
		}
	}
	// Every initial shard's start position is on the board before any
	// subtask starts.
	for _, s := range sc.Model.Shards {
		if s.Added.IsZero() {
			if err := rn.board.Publish(ctx, board.Position{Shard: s.Name, Applied: cfg.From[s.Name]}); err != nil {
				return rn, err
			}
		}
	}
	for _, s := range sc.Model.Shards {
		if s.Added.IsZero() {
			rn.start(ctx, s.Name, rn.saved[s.Name])
		}
	}
	defer rn.stopAll()
	kills := 0
	if cfg.Kills > 0 {
		kills = rng.IntN(cfg.Kills + 1)
	}
	killAt := map[int]bool{}
	for range kills {
		killAt[1+rng.IntN(40)] = true
	}
	lastProgress, progressAt := "", time.Now()
	for round := 1; ; round++ {
		if err := ctx.Err(); err != nil {
			return rn, fmt.Errorf("schedule did not finish: %w; %s", err, rn.describe())
		}
		if p := rn.progress(); p != lastProgress {
			lastProgress, progressAt = p, time.Now()
		} else if time.Since(progressAt) > cfg.Timeout {
			return rn, fmt.Errorf("schedule did not finish: no subtask made progress for %s; %s", cfg.Timeout, rn.describe())
		}
		if err, _ := rn.failed.Load().(error); err != nil {
			return rn, err
		}
		for _, s := range sc.Model.Shards {
			n := speeds[s.Name]
			if n == 0 && round%8 == 0 {
				n = 1
			}
			rn.deliver(ctx, s, n)
		}
		if killAt[round] {
			rn.kill(ctx, rng)
		}
		if cfg.Kill != nil {
			if name := cfg.Kill(round); name != "" && rn.subs[name] != nil {
				rn.killShard(ctx, name)
			}
		}
		for _, s := range sc.Model.Shards {
			if sub := rn.subs[s.Name]; s.Removed && sub != nil && rn.feeds[s.Name].done() {
				sub.r.Retire()
			}
		}
		if cfg.Step != nil && !cfg.Step(round, rn.board, rn.rec) {
			return rn, errors.New("stopped by the scenario")
		}
		if rn.finished(ctx) {
			break
		}
		time.Sleep(cfg.Round)
	}
	rn.stopAll()
	for name, sub := range rn.subs {
		if err := <-sub.done; err != nil && !errors.Is(err, context.Canceled) {
			return rn, fmt.Errorf("subtask %s: %w", name, err)
		}
	}
	return rn, nil
}

func shardNames(m *Model) []string {
	var out []string
	for _, s := range m.Shards {
		out = append(out, s.Name)
	}
	return out
}

// deliver shows n more entries of s's oplog to its reader. An added
// shard's subtask starts (its position published first) before any entry
// after the shard's addition is shown to anyone: the orchestrator finds
// it in config.shards then.
func (rn *runner) deliver(ctx context.Context, s *Shard, n int) {
	if n == 0 {
		return
	}
	f := rn.feeds[s.Name]
	for _, a := range rn.sc.Model.Shards {
		if a.Added.IsZero() || rn.subs[a.Name] != nil {
			continue
		}
		f.mu.Lock()
		last := min(len(f.log), f.visible+n) - 1
		var ts bson.Timestamp
		if last >= 0 {
			ts = tsOf(f.log[last])
		}
		f.mu.Unlock()
		if ts.After(a.Added) {
			_ = rn.board.Publish(ctx, board.Position{Shard: a.Name})
			rn.start(ctx, a.Name, saved{})
		}
	}
	if s.Added.IsZero() || rn.subs[s.Name] != nil {
		f.show(n)
	}
}

// start runs a new instance of shard name's subtask after from.
func (rn *runner) start(ctx context.Context, name string, from saved) {
	rn.insts++
	inst := rn.insts
	killed := &atomic.Bool{}
	fc := &fence{board: rn.board}
	rn.rec.Started(name, inst, from.ts)
	target := rn.cfg.Target
	var keys replay.ShardKeys
	major := 0
	if t := rn.cfg.Sharded; t != nil && !rn.cfg.Unkeyed {
		keys, major = targetKeys{t: t, rec: rn.rec}, t.Major
	}
	r := replay.New(replay.Options{
		ShardKeys: keys, TargetMajor: major,
		Task: "sim", Spec: &rn.spec, Reader: &reader{f: rn.feeds[name], from: from.ts}, Mapper: rn.mapper, From: from.ts,
		ShardMember: true, Shard: name, Board: fc, CheckpointInterval: rn.cfg.CheckpointInterval, HoldPoll: time.Millisecond,
		WriteTimeout: 20 * time.Second, SourceShardKeys: sourceKeys{ns: rn.sc.Model.NS},
		Lookup: rn.sc.Model.Lookup, Recover: from.txns,
		SaveState: func(_ context.Context, ts bson.Timestamp, txns oplog.AssemblerState) error {
			if killed.Load() {
				return nil // a killed process saves nothing more
			}
			rn.mu.Lock()
			defer rn.mu.Unlock()
			if rn.saved == nil {
				rn.saved = map[string]saved{}
			}
			rn.saved[name] = saved{ts: ts, txns: txns}
			return nil
		},
		ApplyAt: func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel, ts []bson.Timestamp) error {
			if killed.Load() {
				return nil // a killed process writes nothing more
			}
			if target != nil {
				if _, err := target.Database(ns.DB).Collection(ns.Coll).BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true)); err != nil {
					return err
				}
			}
			return rn.rec.Apply(ctx, name, inst, models, ts)
		},
	})
	sctx, cancel := context.WithCancel(ctx)
	sub := &subtask{name: name, inst: inst, r: r, fence: fc, killed: killed, cancel: cancel, done: make(chan error, 1)}
	rn.subs[name] = sub
	go func() {
		err := r.Run(sctx)
		if err != nil && !errors.Is(err, context.Canceled) && !killed.Load() {
			rn.failed.Store(fmt.Errorf("subtask %s (instance %d): %w", name, inst, err))
		}
		sub.done <- err
	}()
}

// kill SIGKILLs a random running subtask and restarts it from its last
// saved checkpoint and the transactions saved with it.
func (rn *runner) kill(ctx context.Context, rng *rand.Rand) {
	var names []string
	for _, s := range rn.sc.Model.Shards {
		if sub := rn.subs[s.Name]; sub != nil && !s.Removed {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	rn.killShard(ctx, names[rng.IntN(len(names))])
}

// killShard SIGKILLs shard name's subtask and restarts it from its last
// saved checkpoint.
func (rn *runner) killShard(ctx context.Context, name string) {
	sub := rn.subs[name]
	sub.fence.close()
	sub.killed.Store(true)
	sub.cancel()
	<-sub.done
	rn.mu.Lock()
	from := rn.saved[name]
	rn.mu.Unlock()
	rn.start(ctx, name, from)
}

// finished reports whether every subtask applied its whole oplog (and the
// removed shards' retired).
func (rn *runner) finished(ctx context.Context) bool {
	ps, _ := rn.board.Positions(ctx)
	at := map[string]board.Position{}
	for _, p := range ps {
		at[p.Shard] = p
	}
	for _, s := range rn.sc.Model.Shards {
		if !rn.feeds[s.Name].done() || rn.subs[s.Name] == nil {
			return false
		}
		p := at[s.Name]
		if s.Removed && !p.Retired || !s.Removed && p.Applied != s.Last() {
			return false
		}
		if rn.subs[s.Name].r.Status().Holds.Rechecks > 0 {
			return false
		}
	}
	return true
}

func (rn *runner) stopAll() {
	for _, sub := range rn.subs {
		sub.cancel()
	}
}

// describe says where every subtask is, for a schedule that hangs.
// progress is what every subtask has done so far, for the stuck check:
// its read and applied positions, its writes in flight and its holds.
func (rn *runner) progress() string {
	var b strings.Builder
	for _, s := range rn.sc.Model.Shards {
		if sub := rn.subs[s.Name]; sub != nil {
			st := sub.r.Status()
			h := st.Holds // its seconds grow while a subtask waits: left out
			fmt.Fprintf(&b, "%s %v %v %d %d %d %d %d %d;", s.Name, st.ReadTS, st.AppliedTS, st.InFlight,
				h.HeldWrites, h.HeldNow, h.CommitWaits, h.Barriers, h.Migrations)
		}
	}
	return b.String()
}

func (rn *runner) describe() string {
	var b strings.Builder
	ps, _ := rn.board.Positions(context.Background())
	fmt.Fprintf(&b, "board %+v; ", ps)
	for _, s := range rn.sc.Model.Shards {
		sub := rn.subs[s.Name]
		if sub == nil {
			fmt.Fprintf(&b, "%s: not started; ", s.Name)
			continue
		}
		st := sub.r.Status()
		fmt.Fprintf(&b, "%s: read %v applied %v last %v inFlight %d holds %+v; ", s.Name, st.ReadTS, st.AppliedTS, s.Last(), st.InFlight, st.Holds)
	}
	return b.String()
}
