package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/pipeline"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// Options are a Replayer's parts.
type Options struct {
	Task   string
	Spec   *config.Spec
	Reader source.OplogReader
	// Source is read only for a late entry (see Replayer.late), a
	// collection renamed into the task and a write that still meets
	// another shard's document with its _id after waiting (rehome); may be
	// nil when none of these can happen.
	Source *mongo.Client
	// Lookup, when set, reads one source document by filter instead of
	// a find on Source (nil when there is none), and a cluster time at
	// or past every write the read reflects: a model of a source that
	// has no server.
	Lookup func(ctx context.Context, ns catalog.Namespace, filter bson.Raw) (doc bson.Raw, at bson.Timestamp, err error)
	Target *mongo.Client
	Store  *checkpoint.Store
	// SaveApplied, when set, saves the checkpoint instead of
	// Store.SaveApplied: a shard's subtask saves its own position (the
	// position it publishes on Board is the one saved here).
	SaveApplied func(ctx context.Context, ts bson.Timestamp) error
	// SaveState, when set, saves the checkpoint together with the
	// transactions it must recover (oplog.AssemblerState), instead of
	// SaveApplied or Store. A shard's subtask sets it: while its part of
	// a multi-shard transaction waits for the other subtasks, its
	// checkpoint may then pass the part's prepare entry (saved with it),
	// so a subtask that waits for this one can go on. Pass the state
	// saved with From as Recover.
	SaveState func(ctx context.Context, ts bson.Timestamp, txns oplog.AssemblerState) error
	Recover   oplog.AssemblerState
	Mapper    *catalog.Mapper
	Log       *slog.Logger
	// From is the position replay starts after.
	From bson.Timestamp
	// OverlapUntil is the newest position the full copy may already
	// reflect: up to it, a duplicate key on a unique secondary index is the
	// copy/replay overlap and is tolerated; past it, it is an error.
	OverlapUntil bson.Timestamp
	// CheckpointInterval is how often the checkpoint is saved; 2s when
	// zero.
	CheckpointInterval time.Duration
	// ObserveWrite is told each command's duration and the kind of its
	// first operation ("bulkWrite" for a bulkWrite command).
	ObserveWrite func(op string, d time.Duration)
	// Apply, when set, replaces the target as the sink: it receives each
	// command's writes, all of one kind and one target namespace (the
	// replay benchmark discards them): inserts (InsertOneModel, to apply
	// in any order; a document that exists must be reported as a
	// mongo.BulkWriteException with a duplicate key at its index), or
	// updates or deletes (to apply in order; with ReinsertReplacements
	// a DeleteManyModel by {_id: {$in: [...]}} too). Target may then be
	// nil.
	Apply func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error
	// Translator turns entries into writes; its WholeDocumentUpdates comes
	// from the source's profile, its PipelineUpdates from the target's.
	// InsertModels is set here, except on a shard member (see byID).
	Translator oplog.Translator
	// BulkWrite: the target has the bulkWrite command (conn.Profile's
	// BulkWriteCommand): a writer sends each batch, many namespaces and
	// kinds, as one command. Ignored with Apply or ApplyAt.
	BulkWrite bool
	// WriteConcern is the write concern Target was opened with (its
	// URI's w and journal; nil for the server's default). The bulkWrite
	// commands built from raw documents (bulkcmd.go), which the driver
	// does not complete, carry it.
	WriteConcern *writeconcern.WriteConcern
	// IndexesOneByOne builds indexes with one createIndexes each (conn.Profile's
	// IndexesOneByOne: FerretDB v1 breaks its index registry when a
	// multi-index build loses its client midway).
	IndexesOneByOne bool
	// SerialUpdates sends the update and delete commands of one target
	// database one at a time, whatever the number of writers
	// (conn.Profile's SerialUpdates: FerretDB v1 can hang for good on
	// concurrent updates to one database, and takes concurrent deletes
	// more slowly than serial ones). Inserts still go in parallel.
	SerialUpdates bool
	// ReinsertReplacements applies a run of replacement upserts by _id
	// (a multi-document update on a source that logs whole documents) as
	// one delete of their _ids and one insert of their new versions
	// (conn.Profile's ReinsertReplacements: FerretDB v1 spends tens of
	// milliseconds on each update statement). Ignored on a shard member
	// and on a sharded target; see reinsert.go.
	ReinsertReplacements bool
	// MaxWriteBatch caps the writes of one bulk write; cache.batchSize
	// when zero (or larger).
	MaxWriteBatch int
	// WriteTimeout bounds one bulk write attempt; one that takes longer is
	// abandoned and retried (the writes are idempotent). 2 minutes when
	// zero.
	WriteTimeout time.Duration
	// ShardMember is set when Reader reads a shard's oplog: fromMigrate
	// entries are then chunk migrations and skipped (see oplog.Filter).
	ShardMember bool
	// UniqueIndexed lists target namespaces ("db.coll") with a unique
	// secondary index: their writes are applied by one writer in oplog
	// order, so a delete of {email: x} always lands before a later insert
	// of another document with {email: x}.
	UniqueIndexed map[string]bool
	// Selected are the selected source namespaces when replay starts:
	// a collection created (or renamed) on the source later onto a target
	// name one of them holds stops replay with
	// catalog.ErrNamespaceCollision. Nil checks nothing.
	Selected []catalog.Namespace
	// Shard and Board make the Replayer one subtask of a sharded source:
	// Reader reads shard Shard's oplog (set ShardMember too), and the
	// subtask publishes its position on Board after every checkpoint and
	// follows the ordering rule (see shard.go): after a chunk migration
	// into or out of its shard it holds that namespace's writes until
	// every other subtask has applied up to the migration. Before any
	// subtask starts, publish every shard's start position on Board
	// (Applied = the position its subtask starts after): a shard that has
	// not published holds nobody back.
	Shard string
	Board board.Board
	// HoldPoll is how often held writes look at Board; a quarter of
	// CheckpointInterval, at most 250ms, when zero.
	HoldPoll time.Duration
	// ShardKeys, set when the target is a sharded cluster, says how it
	// shards each collection: every write then carries the target's
	// whole shard key (shardkey.go), and the writers send one command
	// per namespace (no bulkWrite command). TargetMajor is the target's
	// major version (conn.Profile's Major).
	ShardKeys   ShardKeys
	TargetMajor int
	// SourceShardKeys, on a subtask of a sharded source, reads the
	// source's shard-key patterns (its Key only, through mongos): an
	// insert logged without its document key (a binary before 5.3) gets it
	// from the pattern (srckey.go). Nil leaves such an insert keyed on
	// _id alone.
	SourceShardKeys ShardKeys
	// ApplyAt, when set, is Apply told each write's oplog position too
	// (ts[i] is that of models[i]); tests that check the order of writes
	// use it. It takes precedence over Apply.
	ApplyAt func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel, ts []bson.Timestamp) error
	// ApplyDDL, when set, receives each selected DDL command, with the
	// target's names, instead of the target: with Apply it makes a sink
	// of the whole replay (the tests' model of a target).
	ApplyDDL func(ctx context.Context, d oplog.DDL) error
}

// Replayer applies the source's oplog to the target.
type Replayer struct {
	o          Options
	log        *slog.Logger
	recoverErr error
	// drainedOut: a removed shard's subtask, read to its end, finishes
	// its rechecks published as retired (retireRechecks).
	drainedOut atomic.Bool
	// holder applies DDL that creates collections and indexes with what
	// changes data on the target's own clock held back until cut-over.
	holder *holdback.Holder
	// claims are which source collection each target collection receives
	// (nil without Options.Selected); DDL keeps them, one at a time.
	claims *catalog.Claims

	// Dispatch (dispatch.go): the reader's side, one goroutine. asm,
	// lastRaw and lastTS are its own; queues and the budget are shared
	// with the writers.
	asm     *oplog.Assembler
	filter  *oplog.Filter
	budget  *pipeline.Budget
	queues  []chan *[]item
	pending []*[]item // per writer, not yet sent (see send)
	seed    maphash.Seed
	lastRaw bson.Raw       // the last entry read
	lastTS  bson.Timestamp // its ts
	routes  map[string]nsRoute
	tkeys   map[catalog.Namespace]*targetKey         // see targetKeyOf
	skeys   map[catalog.Namespace]targetsharding.Key // see sourceKeyOf

	// Ordering of a shard's subtask (shard.go); runCtx is Run's context,
	// which ends the writers' waits (conflict.go).
	hs     holds
	runCtx context.Context
	parked parking

	// Writers (worker.go, bulk.go): apply sends one command; bulkWrite,
	// set when the target has the command, one bulkWrite. Counted by
	// command kind: commands sent and the writes they carried.
	apply func(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel, batch []item) (reply, error)
	// updateTurns are the target databases' turns to send an update or
	// delete command (Options.SerialUpdates).
	updateTurns sink.Turns
	// reinsert: Options.ReinsertReplacements, where it applies.
	reinsert  bool
	bulkWrite func(ctx context.Context, writes []mongo.ClientBulkWrite) error
	// rawBulk sends a bulkWrite command built from the writes' raw
	// documents (bulkcmd.go) and returns the server's reply; set with
	// bulkWrite, which carries what the builder does not cover.
	rawBulk    func(ctx context.Context, cmd bson.Raw) (bson.Raw, error)
	commands   [numCmdKinds]atomic.Int64
	writesSent [numCmdKinds]atomic.Int64
	keyReads   atomic.Int64 // see routeWrites
	// gate combines the writers' batches into fuller commands (gate.go).
	gate *gate

	// Checkpointing (checkpoint.go): the watermark of applied positions
	// and what holds the checkpoint below it.
	wm *Watermark

	// mu guards the rest: what dispatch, the writers and the checkpoint
	// share, and what Status reads.
	mu         sync.Mutex
	applying   *applyingUnit   // a unit of several entries, from Add to applied
	oldestOpen *bson.Timestamp // first entry of the oldest open transaction
	seen       bson.Timestamp  // everything read up to it is dispatched or buffered (Options.Board)
	// reapplied is the highest ts an earlier run may have applied (saved
	// with the checkpoint): a write up to it may meet a newer document.
	reapplied bson.Timestamp
	// staleUpserts counts upserts stepped over (stale.go).
	staleUpserts int64
	savedTS      bson.Timestamp
	savedAt      time.Time
	unique       map[catalog.Namespace]bool
	recopied     map[catalog.Namespace]bson.Timestamp // see recopy
	// Status (status.go).
	readTS          bson.Timestamp
	newestTS        bson.Timestamp
	newestKnown     bool
	counts          map[string]int64
	skipped         map[string]int64
	tolerated       int64
	rate            rateMeter
	lastAppliedWall time.Time
}

// item is one write bound for a writer.
type item struct {
	ts    bson.Timestamp
	ns    catalog.Namespace // target namespace
	key   bson.Raw          // document key: picks the writer
	kind  string            // the operation's kind, for Status.Applied
	model mongo.WriteModel  // nil: re-read the document from the source
	bytes int64
	src   catalog.Namespace // source namespace, for a re-read
	// Set by bucket: the partition hash of (ns, key), or of ns alone when
	// serial (a namespace with a unique secondary index); and the command
	// the write travels in.
	hash   uint64
	serial bool
	cmd    cmdKind
	// op, when its Op is set, is an insert, update or delete its writer
	// translates (expand): it becomes the item's writes, all but the last
	// marked extra (not counted in the watermark, no bytes).
	op    oplog.Entry
	extra bool
	// tk is how a sharded target shards ns; nil when it does not.
	tk *targetKey
	// filter, with op, keeps the source's matching documents (subset.go).
	filter *docfilter.Filter
	// parked: its document waits after a conflict (conflict.go), and
	// its unpark applies and finishes it.
	parked bool
	// settled: a write settleConflict placed; it steps over a document it
	// meets.
	settled bool
	// unconfirmed: an upsert that must not insert its document by
	// itself (oplog.Write.Unconfirmed, unconfirmed.go).
	unconfirmed bool
}

// New builds a Replayer.
func New(o Options) *Replayer {
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 2 * time.Second
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	maxBytes, _ := o.Spec.Cache.MaxBytes.Bytes()
	r := &Replayer{
		o: o, log: log.With("task", o.Task), wm: NewWatermark(o.From), asm: oplog.NewAssembler(),
		filter: &oplog.Filter{IsInternal: o.Mapper.IsInternal, ShardMember: o.ShardMember},
		budget: pipeline.NewBudget(maxBytes), seed: maphash.MakeSeed(),
		unique: map[catalog.Namespace]bool{}, routes: map[string]nsRoute{}, counts: map[string]int64{}, skipped: map[string]int64{},
		readTS: o.From, savedTS: o.From,
	}
	if o.Selected != nil {
		r.claims = catalog.NewClaims(o.Mapper, o.Selected)
	}
	for ns, u := range o.UniqueIndexed {
		r.unique[catalog.ParseNamespace(ns)] = u
	}
	if o.Target != nil {
		r.holder = holdback.NewHolder(o.Target, o.Spec.Checkpoint.Database, o.Task, log)
	}
	r.o.Translator.InsertModels = !o.ShardMember
	r.apply = r.applier()
	r.reinsert = o.ReinsertReplacements && !o.ShardMember && o.ShardKeys == nil
	if o.BulkWrite && o.Apply == nil && o.ApplyAt == nil && o.Target != nil && o.ShardKeys == nil {
		r.bulkWrite = func(ctx context.Context, writes []mongo.ClientBulkWrite) error {
			_, err := o.Target.BulkWrite(ctx, writes, options.ClientBulkWrite().SetOrdered(true).SetBypassDocumentValidation(true))
			return err
		}
		admin := o.Target.Database("admin")
		r.rawBulk = func(ctx context.Context, cmd bson.Raw) (bson.Raw, error) {
			return admin.RunCommand(ctx, cmd).Raw()
		}
	}
	if len(o.Recover.Entries) > 0 {
		var txns oplog.AssemblerState
		var err error
		txns.Entries, r.reapplied, err = r.hs.recoverState(o.Recover.Entries)
		if err == nil {
			err = r.asm.Recover(txns)
		}
		if err != nil {
			r.recoverErr = fmt.Errorf("replay: %w", err)
		}
	}
	return r
}

// Run replays until ctx ends or a fatal error. On a clean stop it waits
// for the writes in flight and saves a last checkpoint.
func (r *Replayer) Run(ctx context.Context) error {
	if r.recoverErr != nil {
		return r.recoverErr
	}
	// Parked writes wait no longer than the reader runs (conflict.go).
	pctx, stopParked := context.WithCancel(ctx)
	defer stopParked()
	r.runCtx = pctx
	writers := r.o.Spec.Threads.Writers
	depth := r.o.Spec.Cache.BucketSize * r.o.Spec.Cache.BatchSize
	// Writes travel in slices of up to sendBatch: the queue holds about
	// depth writes.
	r.gate = newGate(r.commandsInFlight(), r.writeBatchMax())
	r.queues = make([]chan *[]item, writers)
	r.pending = make([]*[]item, writers)
	for i := range r.queues {
		r.queues[i] = make(chan *[]item, max(depth/sendBatch, 2))
		r.pending[i] = getItems()
	}
	// Writers outlive the reader's context so a clean stop drains them.
	wctx, stopWriters := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriters()
	wg, wctx := errgroup.WithContext(wctx)
	for i := range r.queues {
		wg.Go(func() error { return r.newWriter(r.queues[i]).run(wctx) })
	}
	r.parked.run = wg.Go // parked documents (conflict.go)
	// A writer that fails stops the reader too: otherwise the reader would
	// wait forever for room in the failed writer's queue.
	dctx, stopReader := context.WithCancelCause(ctx)
	defer stopReader(nil)
	defer context.AfterFunc(wctx, func() { stopReader(fmt.Errorf("writer stopped: %w", context.Cause(wctx))) })()
	g, gctx := errgroup.WithContext(dctx)
	g.Go(func() error { return r.dispatch(gctx, wctx) })
	g.Go(func() error { return r.checkpointLoop(gctx) })
	g.Go(func() error { return r.watchNewest(gctx) })
	if r.o.Board != nil {
		g.Go(func() error { return r.holdLoop(gctx) })
	}

	err := g.Wait()
	stopParked()
	retired := errors.Is(err, errRetired)
	if retired {
		err = nil
	}
	for _, q := range r.queues {
		close(q)
	}
	werr := wg.Wait()
	if werr != nil && !errors.Is(werr, context.Canceled) {
		err = errors.Join(err, werr)
	}
	// The last checkpoint, whatever stopped us: everything at or below it
	// is on the target.
	if serr := r.saveCheckpoint(context.WithoutCancel(ctx), true); serr != nil {
		err = errors.Join(err, serr)
	} else if r.o.Board != nil {
		if perr := r.publish(context.WithoutCancel(ctx), retired && err == nil); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (r *Replayer) count(kind string, skipped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if skipped {
		r.skipped[kind]++
		return
	}
	r.counts[kind]++
}
