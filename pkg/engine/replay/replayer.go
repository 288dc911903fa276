package replay

import (
	"bytes"
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
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/pipeline"
	"github.com/mongoferry/mongoferry/pkg/engine/shard"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Options are a Replayer's parts.
type Options struct {
	Task   string
	Spec   *config.Spec
	Reader source.OplogReader
	// Source is read only for a late entry (see Replayer.late); may be nil
	// when the reader never returns one.
	Source *mongo.Client
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
	// ObserveWrite is told each write batch's duration and operation kind.
	ObserveWrite func(op string, d time.Duration)
	// Apply, when set, replaces the target as the sink: it receives each
	// ordered batch of writes for one target namespace (the replay
	// benchmark discards them). Target may then be nil.
	Apply func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error
	// Translator turns entries into writes; its WholeDocumentUpdates comes
	// from the source's profile, its PipelineUpdates from the target's.
	Translator oplog.Translator
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
	Board shard.Board
	// HoldPoll is how often held writes look at Board; a quarter of
	// CheckpointInterval, at most 250ms, when zero.
	HoldPoll time.Duration
	// ApplyAt, when set, is Apply told each write's oplog position too
	// (ts[i] is that of models[i]); tests that check the order of writes
	// use it. It takes precedence over Apply.
	ApplyAt func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel, ts []bson.Timestamp) error
}

// Replayer applies the source's oplog to the target.
type Replayer struct {
	o       Options
	log     *slog.Logger
	wm      *Watermark
	asm     *oplog.Assembler
	filter  *oplog.Filter
	budget  *pipeline.Budget
	queues  []chan item
	seed    maphash.Seed
	applied atomic.Pointer[bson.Timestamp]
	hs      holds

	mu              sync.Mutex
	hold            *bson.Timestamp // the checkpoint stays below this while set
	oldestOpen      *bson.Timestamp // first entry of the oldest open transaction
	readTS          bson.Timestamp
	seen            bson.Timestamp       // the last entry dispatched or buffered (Options.Board)
	txns            oplog.AssemblerState // what SaveState saves with the checkpoint
	recoverErr      error
	lastRaw         bson.Raw       // the last entry read (dispatch goroutine only)
	lastTS          bson.Timestamp // its ts
	newestTS        bson.Timestamp
	newestKnown     bool
	savedTS         bson.Timestamp
	savedAt         time.Time
	unique          map[catalog.Namespace]bool
	recopied        map[catalog.Namespace]bson.Timestamp // see recopy
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
	kind  string
	model mongo.WriteModel // nil: re-read the document from the source
	bytes int64
	src   catalog.Namespace // source namespace, for a re-read
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
		unique: map[catalog.Namespace]bool{}, counts: map[string]int64{}, skipped: map[string]int64{},
		readTS: o.From, savedTS: o.From,
	}
	for ns, u := range o.UniqueIndexed {
		r.unique[catalog.ParseNamespace(ns)] = u
	}
	r.applied.Store(&o.From)
	if len(o.Recover.Entries) > 0 {
		if err := r.asm.Recover(o.Recover); err != nil {
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
	writers := r.o.Spec.Threads.Writers
	depth := r.o.Spec.Cache.BucketSize * r.o.Spec.Cache.BatchSize
	r.queues = make([]chan item, writers)
	for i := range r.queues {
		r.queues[i] = make(chan item, depth)
	}
	// Writers outlive the reader's context so a clean stop drains them.
	wctx, stopWriters := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriters()
	wg, wctx := errgroup.WithContext(wctx)
	for i := range r.queues {
		wg.Go(func() error { return r.write(wctx, r.queues[i]) })
	}
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
	if serr := r.saveCheckpoint(context.WithoutCancel(ctx)); serr != nil {
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

// dispatch reads entries, assembles transactions, translates and hands
// writes to the writers.
func (r *Replayer) dispatch(ctx, wctx context.Context) error {
	failures := 0
	for {
		// Asked before reading: an empty read after Retire means the
		// end of the removed shard's oplog.
		retiring := r.o.Board != nil && r.retiring()
		raws, err := r.o.Reader.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failures++
			if failures > 10 {
				return fmt.Errorf("read oplog: %w", err)
			}
			r.log.Warn("oplog read failed; retrying", "err", err, "attempt", failures)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
			}
			continue
		}
		failures = 0
		if len(raws) == 0 && retiring {
			if err := r.drain(ctx, wctx); err != nil {
				return err
			}
			r.log.Info("removed shard read to its end; subtask retired", "shard", r.o.Shard)
			return errRetired
		}
		for _, raw := range raws {
			if err := r.entry(ctx, wctx, raw); err != nil {
				return err
			}
			if r.o.Board != nil {
				r.mu.Lock()
				r.seen = r.lastTS
				r.mu.Unlock()
			}
		}
		if err := wctx.Err(); err != nil {
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		}
	}
}

func (r *Replayer) entry(ctx, wctx context.Context, raw bson.Raw) error {
	e, err := oplog.Parse(raw)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if last := r.lastRaw; last != nil {
		switch c := e.TS().Compare(r.lastTS); {
		case c == 0 && bytes.Equal(raw, last):
			r.count("duplicate", true) // a reader repeating itself
			return nil
		case c < 0:
			return r.late(ctx, wctx, e)
		}
	}
	r.lastRaw, r.lastTS = raw, e.TS()
	r.mu.Lock()
	r.readTS = e.TS()
	r.mu.Unlock()
	if err := r.checkTopology(e); err != nil {
		return err
	}
	if skip, reason := r.filter.Skip(e); skip {
		r.count(reason, true)
		r.noteSkip(e, e.TS(), reason)
		r.wm.Dispatch(e.TS(), 0)
		return nil
	}
	var ending oplog.AssemblerState
	if r.o.SaveState != nil && e.Command() == oplog.CmdCommitTransaction {
		ending = r.asm.Checkpoint() // with the transaction this commit ends
	}
	unit, ok, err := r.asm.Add(e)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	// The Assembler belongs to this goroutine; the checkpoint reads what
	// it holds from here.
	oldest, open := r.asm.OldestBufferedTS()
	r.mu.Lock()
	r.oldestOpen = nil
	if open {
		r.oldestOpen = &oldest
	}
	if ok && unit.FirstTS != unit.TS {
		// The unit's first entries are no longer buffered: from here
		// until it is applied (applyBarrier), the checkpoint stays below
		// them, with no gap in which a checkpoint could pass them.
		first := unit.FirstTS
		r.hold = &first
	}
	r.mu.Unlock()
	if !ok {
		return nil // buffered: a transaction still open
	}
	if r.o.Board != nil && e.Command() == oplog.CmdCommitTransaction && insertsDocuments(unit) {
		if err := r.waitCommit(ctx, wctx, unit, commitTS(e), ending); err != nil {
			return err
		}
	}
	if unit.FirstTS != unit.TS {
		// A chain of entries: the checkpoint must stay below its first
		// entry until all of it is applied.
		return r.applyBarrier(ctx, wctx, unit)
	}
	// One entry (a plain write, a one-entry transaction, a batched write
	// of 8.0, a user's applyOps): its operations all carry its ts, so the
	// watermark passes it only once all are applied, and each document's
	// writes stay in order on its writer. DDL inside is a barrier of its
	// own (dispatchOp).
	if unit.Txn {
		r.count("transaction", false)
	}
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS); err != nil {
			return err
		}
	}
	return nil
}

// late applies an entry older than one already read: it became visible
// on the source after later entries had been read (a hole in the oplog,
// see source.Tailer.Settle). Its writes cannot be replayed in place, so
// once every queued write is on the target, the current state of each
// document it touched is read from the source and written to the target
// (or the document deleted there when the source no longer has it). Later
// entries then apply on top, as they do over the full copy.
func (r *Replayer) late(ctx, wctx context.Context, e oplog.Entry) error {
	ts := e.TS()
	r.log.Warn("an oplog entry became visible after later ones (a hole in the source's oplog); its documents are re-read from the source",
		"ts", ts, "ns", e.NS(), "op", e.Kind().String())
	if e.Kind() != oplog.Insert && e.Kind() != oplog.Update && e.Kind() != oplog.Delete {
		if skip, _ := r.filter.Skip(e); skip {
			r.count("late", true)
			return nil
		}
		return fmt.Errorf("replay: the source's oplog showed the %s entry at %d,%d after later entries were applied, "+
			"and only inserts, updates and deletes can be applied out of order: resync the task (delete its checkpoint database and run it again)",
			e.Kind(), ts.T, ts.I)
	}
	ws, err := r.o.Translator.Append(nil, e)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	for _, w := range ws {
		src := sourceOf(w.NS)
		if w.Model == nil || !r.o.Mapper.Selected(src) {
			continue
		}
		it := item{ts: r.lastTS, ns: r.o.Mapper.Target(src), key: w.DocKey, src: src}
		if err := r.refetch(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// dispatchOp translates one operation and queues its writes; DDL is a
// barrier.
func (r *Replayer) dispatchOp(ctx, wctx context.Context, op oplog.Entry, ts bson.Timestamp) error {
	if skip, reason := r.filter.Skip(op); skip {
		r.count(reason, true)
		r.noteSkip(op, ts, reason)
		r.wm.Dispatch(ts, 0)
		return nil
	}
	if err := r.refuseTimeSeries(op); err != nil {
		return err
	}
	ws, err := r.o.Translator.Append(nil, op)
	if errors.Is(err, oplog.ErrUnaddressablePath) && op.Kind() == oplog.Update {
		// A field name no update path can address ($setField on a name
		// with '.' or '$'): the document is re-read from the source when
		// its writer reaches this point.
		ws, err = []oplog.Write{{NS: op.NS(), Kind: oplog.Update, DocKey: op.O2()}}, nil
	}
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var items []item
	for _, w := range ws {
		if w.DDL != nil {
			if err := r.flushAndDDL(ctx, wctx, items, *w.DDL, ts); err != nil {
				return err
			}
			items = nil
			continue
		}
		src := sourceOf(w.NS)
		if !r.o.Mapper.Selected(src) {
			r.count("filtered", true)
			continue
		}
		if r.o.ShardMember {
			w = byID(w)
		}
		it := item{ts: ts, ns: r.o.Mapper.Target(src), src: src, key: w.DocKey, kind: w.Kind.String(), model: w.Model, bytes: int64(len(op.Raw()))}
		if w.Model == nil {
			it.kind = kindRefetch
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		r.wm.Dispatch(ts, 0)
		return nil
	}
	r.wm.Dispatch(ts, len(items))
	for _, it := range items {
		if err := r.send(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// bucket picks the writer for a write: by (namespace, document key), or by
// namespace alone for collections with a unique secondary index.
func (r *Replayer) bucket(ns catalog.Namespace, docKey bson.Raw) int {
	var h maphash.Hash
	h.SetSeed(r.seed)
	_, _ = h.WriteString(ns.DB)
	_ = h.WriteByte('.')
	_, _ = h.WriteString(ns.Coll)
	r.mu.Lock()
	serial := r.unique[ns]
	r.mu.Unlock()
	if !serial {
		_, _ = h.Write(docKey)
	}
	return int(h.Sum64() % uint64(len(r.queues)))
}

// drain waits until every queued write is applied.
func (r *Replayer) drain(ctx, wctx context.Context) error {
	for r.wm.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// applyBarrier applies a transaction unit as one: the writers are
// drained, its operations applied in order, and the checkpoint is held
// below its first entry until it is complete.
func (r *Replayer) applyBarrier(ctx, wctx context.Context, unit oplog.Unit) error {
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	first := unit.FirstTS
	r.mu.Lock()
	r.hold = &first
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.hold = nil
		r.txns = oplog.AssemblerState{}
		r.mu.Unlock()
	}()
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS); err != nil {
			return err
		}
		// One operation at a time: a transaction's writes may touch one
		// document twice, on any writer.
		if err := r.drain(ctx, wctx); err != nil {
			return err
		}
	}
	r.count("transaction", false)
	r.wm.Dispatch(unit.TS, 0)
	return nil
}

// flushAndDDL queues pending items, drains, applies a DDL command once.
func (r *Replayer) flushAndDDL(ctx, wctx context.Context, pending []item, ddl oplog.DDL, ts bson.Timestamp) error {
	if len(pending) > 0 {
		r.wm.Dispatch(ts, len(pending))
		for _, it := range pending {
			if err := r.send(ctx, it); err != nil {
				return err
			}
		}
	}
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	if err := r.applyDDL(ctx, ddl); err != nil {
		return err
	}
	r.count("ddl", false)
	r.wm.Dispatch(ts, 0)
	return nil
}

// write applies one writer's queue. It takes what is queued, up to
// cache.batchSize writes, and applies it as one ordered bulk write per
// namespace. Grouping by namespace keeps each document's writes in queue
// order (a document lives in one namespace) while writes interleaved over
// many collections still travel in large batches.
func (r *Replayer) write(ctx context.Context, q chan item) error {
	batchMax := r.o.Spec.Cache.BatchSize
	if m := r.o.MaxWriteBatch; m > 0 && m < batchMax {
		batchMax = m
	}
	var batch []item
	var g grouper
	for {
		it, ok := <-q
		if !ok {
			return nil
		}
		batch = append(batch[:0], it)
	fill:
		for len(batch) < batchMax {
			select {
			case it, ok := <-q:
				if !ok {
					break fill
				}
				batch = append(batch, it)
			default:
				break fill
			}
		}
		for _, group := range g.group(batch) {
			if err := r.applyGroup(ctx, group); err != nil {
				return err
			}
		}
	}
}

// applyGroup applies writes of one namespace and marks them done.
func (r *Replayer) applyGroup(ctx context.Context, group []item) error {
	err := r.applyItems(ctx, group)
	for _, it := range group {
		r.budget.Release(it.bytes)
	}
	if err != nil {
		return err
	}
	for _, it := range group {
		r.count(it.kind, false)
		r.wm.Done(it.ts)
	}
	r.mu.Lock()
	r.rate.add(len(group))
	r.lastAppliedWall = time.Now()
	r.mu.Unlock()
	return nil
}

// grouper splits a writer's batch into runs of one namespace each, in
// order of first appearance, keeping the queue order inside each run. It
// keeps its buffers from one batch to the next.
type grouper struct {
	index  map[catalog.Namespace]int
	groups [][]item
	one    [1][]item
}

// group returns batch's runs; they are valid until the next call. A batch
// of one namespace (the common case) is returned as is, without copying.
func (g *grouper) group(batch []item) [][]item {
	single := true
	for i := 1; i < len(batch); i++ {
		if batch[i].ns != batch[0].ns {
			single = false
			break
		}
	}
	if single {
		// Not kept in groups: their buffers are reused below, and batch's
		// belongs to the writer.
		g.one[0] = batch
		return g.one[:]
	}
	if g.index == nil {
		g.index = map[catalog.Namespace]int{}
	}
	clear(g.index)
	n := 0
	for _, it := range batch {
		k, ok := g.index[it.ns]
		if !ok {
			k = n
			g.index[it.ns] = k
			if n == len(g.groups) {
				g.groups = append(g.groups, nil)
			}
			g.groups[k] = g.groups[k][:0]
			n++
		}
		g.groups[k] = append(g.groups[k], it)
	}
	return g.groups[:n]
}

// applyBatch writes a batch in order, retrying retryable errors and
// stepping over duplicate keys of the copy/replay overlap.
func (r *Replayer) applyBatch(ctx context.Context, batch []item) error {
	apply := r.o.Apply
	if r.o.ApplyAt != nil {
		at := make([]bson.Timestamp, len(batch))
		for i, it := range batch {
			at[i] = it.ts
		}
		apply = func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
			return r.o.ApplyAt(ctx, ns, models, at[len(at)-len(models):])
		}
	}
	if apply == nil {
		apply = func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
			_, err := r.o.Target.Database(ns.DB).Collection(ns.Coll).BulkWrite(ctx, models,
				options.BulkWrite().SetOrdered(true).SetBypassDocumentValidation(true))
			return err
		}
	}
	backoff := 200 * time.Millisecond
	for attempt := 0; len(batch) > 0; attempt++ {
		models := make([]mongo.WriteModel, len(batch))
		for i, it := range batch {
			models[i] = it.model
		}
		started := time.Now()
		actx, cancel := context.WithTimeout(ctx, r.writeTimeout())
		err := apply(actx, batch[0].ns, models)
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: no answer within %s", errWriteTimeout, r.writeTimeout())
		}
		cancel()
		if r.o.ObserveWrite != nil {
			r.o.ObserveWrite(batch[0].kind, time.Since(started))
		}
		if err == nil {
			return nil
		}
		class := sink.Classify(err)
		if errors.Is(err, errWriteTimeout) {
			class = sink.Retryable
		}
		switch class {
		case sink.Retryable:
			if attempt >= 8 || ctx.Err() != nil {
				return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			r.log.Warn("retrying replay batch", "ns", batch[0].ns.String(), "attempt", attempt+1, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue // writes are idempotent: the whole batch again
		case sink.Conflict:
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 {
				return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			k := bwe.WriteErrors[0].Index
			it := batch[k]
			if !r.inOverlap(it.ns, it.ts) {
				return fmt.Errorf("replay into %s at %d,%d: %w: a unique index on the target refuses a write the source accepted; "+
					"the target holds documents the source does not (written outside this task?)", it.ns, it.ts.T, it.ts.I, err)
			}
			// Overlap: the copy already holds a newer state; later entries
			// bring the document where the source has it. Writes before k
			// were applied (ordered); k is stepped over; the rest go again.
			r.mu.Lock()
			r.tolerated++
			r.mu.Unlock()
			r.log.Debug("duplicate key tolerated in the copy/replay overlap", "ns", it.ns.String(), "ts", it.ts)
			batch = batch[k+1:]
			continue
		default:
			if k, ok := stalePath(err, batch); ok {
				// Writes before k were applied (ordered); the document of
				// k is written as the source has it now, and the rest go
				// again.
				r.log.Info("an update does not fit the target's newer document (an older entry applied again); the document is re-read from the source",
					"ns", batch[k].ns.String(), "ts", batch[k].ts, "err", err)
				if err := r.refetch(ctx, batch[k]); err != nil {
					return err
				}
				batch = batch[k+1:]
				continue
			}
			return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
	}
	return nil
}

// errWriteTimeout marks a bulk write abandoned after WriteTimeout.
var errWriteTimeout = errors.New("write batch timed out")

func (r *Replayer) writeTimeout() time.Duration {
	if r.o.WriteTimeout > 0 {
		return r.o.WriteTimeout
	}
	return 2 * time.Minute
}

// checkpointLoop saves the checkpoint every interval.
func (r *Replayer) checkpointLoop(ctx context.Context) error {
	t := time.NewTicker(r.o.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := r.saveCheckpoint(ctx); err != nil {
				r.log.Warn("checkpoint not saved; retrying", "err", err)
			} else if r.o.Board != nil {
				if err := r.publish(ctx, false); err != nil {
					r.log.Warn("position not published; retrying", "shard", r.o.Shard, "err", err)
				}
			}
		}
	}
}

// Checkpoint returns the position at or below which everything is on the
// target and no open or in-flight transaction begins.
func (r *Replayer) Checkpoint() bson.Timestamp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpointLocked()
}

// checkpointLocked is Checkpoint with r.mu held: the dispatcher changes
// what it reads (seen, hold, open transactions, txns) under r.mu, so a
// position and the transactions saved with it agree.
func (r *Replayer) checkpointLocked() bson.Timestamp {
	ts := r.wm.Applied()
	if r.o.Board != nil {
		// A subtask publishes its checkpoint for the others: up to just
		// below its first write not yet applied (a held one), and below
		// the migrations it holds writes for. seen is read first: once
		// nothing is in flight, everything up to it is applied, or held
		// back below by a cap (open transactions).
		seen := r.seen
		ts = r.wm.Frontier()
		if r.wm.InFlight() == 0 {
			ts = maxTS(ts, seen)
		}
		ts = r.hs.cap(ts)
	}
	if r.oldestOpen != nil {
		ts = minTS(ts, before(*r.oldestOpen))
	}
	if r.hold != nil {
		ts = minTS(ts, before(*r.hold))
	}
	return ts
}

func (r *Replayer) saveCheckpoint(ctx context.Context) error {
	r.mu.Lock()
	ts := r.checkpointLocked()
	txns := r.txns
	unchanged := ts.Compare(r.savedTS) <= 0
	r.mu.Unlock()
	if unchanged {
		return nil
	}
	switch {
	case r.o.SaveState != nil:
		if err := r.o.SaveState(ctx, ts, txns); err != nil {
			return err
		}
	case r.o.SaveApplied != nil:
		if err := r.o.SaveApplied(ctx, ts); err != nil {
			return err
		}
	case r.o.Store != nil:
		if err := r.o.Store.SaveApplied(ctx, ts); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.savedTS, r.savedAt = ts, time.Now()
	r.mu.Unlock()
	return nil
}

// watchNewest polls the source's newest position for the lag.
func (r *Replayer) watchNewest(ctx context.Context) error {
	for {
		if ts, err := r.o.Reader.Newest(ctx); err == nil {
			r.mu.Lock()
			if ts.Compare(r.newestTS) > 0 {
				r.newestTS = ts
			}
			r.newestKnown = true
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
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

// before returns the position just below ts.
func before(ts bson.Timestamp) bson.Timestamp {
	if ts.I > 0 {
		return bson.Timestamp{T: ts.T, I: ts.I - 1}
	}
	if ts.T == 0 {
		return ts
	}
	return bson.Timestamp{T: ts.T - 1, I: ^uint32(0)}
}

func minTS(a, b bson.Timestamp) bson.Timestamp {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}
