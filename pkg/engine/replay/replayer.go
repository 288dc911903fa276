package replay

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
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
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Options are a Replayer's parts.
type Options struct {
	Task   string
	Spec   *config.Spec
	Reader source.OplogReader
	Target *mongo.Client
	Store  *checkpoint.Store
	Mapper *catalog.Mapper
	Log    *slog.Logger
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
	// benchmark discards them). Target may then be nil. models is only
	// valid during the call.
	Apply func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error
	// UniqueIndexed lists target namespaces ("db.coll") with a unique
	// secondary index: their writes are applied by one writer in oplog
	// order, so a delete of {email: x} always lands before a later insert
	// of another document with {email: x}.
	UniqueIndexed map[string]bool
}

// Replayer applies the source's oplog to the target.
//
// One dispatch goroutine reads, parses, assembles and translates entries
// and partitions their writes by (namespace, document key) into one
// pending batch per writer; a batch goes to its writer's queue when it
// holds cache.batchSize writes, at the end of every batch read, and before
// a barrier. The positions read are registered with the Watermark just
// before any batch holding their writes is queued. Each writer merges what
// is queued into windows of up to cache.batchSize writes and applies each
// window as one ordered bulk write per namespace: a document's writes all
// go to one writer, in one namespace, in oplog order.
type Replayer struct {
	o       Options
	log     *slog.Logger
	wm      *Watermark
	asm     *oplog.Assembler
	budget  *pipeline.Budget
	queues  []chan []item
	free    chan []item // emptied batches, for reuse
	seed    maphash.Seed
	applied atomic.Pointer[bson.Timestamp]

	// The dispatch goroutine's own state.
	pending    [][]item         // per writer: writes not yet queued
	marks      []Position       // positions read, not yet registered with wm
	opWrites   []routedItem     // scratch: one operation's writes
	translated []oplog.Write    // scratch: one operation's translation
	routes     map[string]route // by source namespace
	lastRead   bson.Timestamp

	mu              sync.Mutex
	hold            *bson.Timestamp // the checkpoint stays below this while set
	oldestOpen      *bson.Timestamp // first entry of the oldest open transaction
	readTS          bson.Timestamp
	newestTS        bson.Timestamp
	savedTS         bson.Timestamp
	savedAt         time.Time
	unique          map[string]bool
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
	kind  oplog.Kind
	model mongo.WriteModel
	bytes int64
}

// routedItem is a write and the writer it goes to.
type routedItem struct {
	item
	writer int
}

// route is what the dispatcher knows of a source namespace.
type route struct {
	selected bool
	target   catalog.Namespace
	// key is target.String(), hashed with the document key; serial
	// (a unique secondary index) hashes the namespace alone.
	key    string
	serial bool
}

// maxRoutes bounds the route cache; it is emptied when full and after
// every DDL command (which may change a collection's unique indexes).
const maxRoutes = 4096

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
		budget: pipeline.NewBudget(maxBytes), seed: maphash.MakeSeed(), routes: map[string]route{},
		unique: map[string]bool{}, counts: map[string]int64{}, skipped: map[string]int64{},
		readTS: o.From, savedTS: o.From, lastRead: o.From,
	}
	for ns, u := range o.UniqueIndexed {
		r.unique[ns] = u
	}
	r.applied.Store(&o.From)
	return r
}

// Run replays until ctx ends or a fatal error. On a clean stop it waits
// for the writes in flight and saves a last checkpoint.
func (r *Replayer) Run(ctx context.Context) error {
	writers := r.o.Spec.Threads.Writers
	// Each queue holds cache.bucketSize batches of up to cache.batchSize
	// writes.
	r.queues = make([]chan []item, writers)
	for i := range r.queues {
		r.queues[i] = make(chan []item, r.o.Spec.Cache.BucketSize)
	}
	r.free = make(chan []item, writers*(r.o.Spec.Cache.BucketSize+2))
	r.pending = make([][]item, writers)
	// Writers outlive the reader's context so a clean stop drains them.
	wctx, stopWriters := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriters()
	wg, wctx := errgroup.WithContext(wctx)
	for i := range r.queues {
		wg.Go(func() error { return r.write(wctx, r.queues[i]) })
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.dispatch(gctx, wctx) })
	g.Go(func() error { return r.checkpointLoop(gctx) })
	g.Go(func() error { return r.watchNewest(gctx) })

	err := g.Wait()
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
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// dispatch reads entries, assembles transactions, translates and hands
// writes to the writers.
func (r *Replayer) dispatch(ctx, wctx context.Context) error {
	// Queueing gives up when the reader stops or a writer fails.
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(wctx, cancel)()
	failures := 0
	for {
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
		for _, raw := range raws {
			if err := r.entry(qctx, wctx, raw); err != nil {
				return r.queueErr(ctx, wctx, err)
			}
		}
		// Nothing waits for the next read: queue what this one produced.
		if err := r.flushAll(qctx); err != nil {
			return r.queueErr(ctx, wctx, err)
		}
		if err := wctx.Err(); err != nil {
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		}
	}
}

// queueErr explains an error of the dispatcher: a failed writer rather
// than the cancellation it caused.
func (r *Replayer) queueErr(ctx, wctx context.Context, err error) error {
	if ctx.Err() == nil && wctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
	}
	return err
}

func (r *Replayer) entry(ctx, wctx context.Context, raw bson.Raw) error {
	e, err := oplog.Parse(raw)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	r.lastRead = e.TS()
	if skip, reason := oplog.Skip(e, r.o.Mapper.IsInternal); skip {
		r.count(reason, true)
		r.mark(e.TS(), 0)
		return nil
	}
	if !e.Command().IsTxn() {
		// A unit of one, as the Assembler would return it (it only
		// buffers transaction entries): no need to ask it.
		return r.dispatchOp(ctx, wctx, e, e.TS(), false)
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
	r.mu.Unlock()
	if !ok {
		return nil // buffered: a transaction still open
	}
	if unit.Txn || unit.FirstTS != unit.TS {
		return r.applyBarrier(ctx, wctx, unit)
	}
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS, true); err != nil {
			return err
		}
	}
	return nil
}

// mark records that position ts produced n writes; the watermark learns
// it before any of those writes is queued.
func (r *Replayer) mark(ts bson.Timestamp, n int) {
	if k := len(r.marks); k > 0 && r.marks[k-1].TS == ts {
		r.marks[k-1].Writes += n
		return
	}
	r.marks = append(r.marks, Position{TS: ts, Writes: n})
}

// dispatchOp translates one operation and adds its writes to the writers'
// pending batches; DDL is a barrier. skip says whether the operation still
// needs the skip rules (an operation taken out of a transaction).
func (r *Replayer) dispatchOp(ctx, wctx context.Context, op oplog.Entry, ts bson.Timestamp, skip bool) error {
	if skip {
		if skip, reason := oplog.Skip(op, r.o.Mapper.IsInternal); skip {
			r.count(reason, true)
			r.mark(ts, 0)
			return nil
		}
	}
	ws, err := oplog.AppendTranslate(r.translated[:0], op)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer func() {
		clear(ws) // drop the references to the entry's bytes
		r.translated = ws[:0]
	}()
	items := r.opWrites[:0]
	for _, w := range ws {
		if w.DDL != nil {
			if err := r.queueOp(ctx, ts, items); err != nil {
				return err
			}
			items = items[:0]
			if err := r.barrierDDL(ctx, wctx, *w.DDL, ts); err != nil {
				return err
			}
			continue
		}
		rt := r.route(w.NS)
		if !rt.selected {
			r.count("filtered", true)
			continue
		}
		items = append(items, routedItem{
			item:   item{ts: ts, ns: rt.target, kind: w.Kind, model: w.Model, bytes: int64(len(op.Raw()))},
			writer: r.bucket(rt, w.DocKey),
		})
	}
	if len(items) == 0 {
		r.mark(ts, 0)
		r.opWrites = items
		return nil
	}
	err = r.queueOp(ctx, ts, items)
	clear(items) // drop the references to the models
	r.opWrites = items[:0]
	return err
}

// queueOp marks position ts with the operation's writes, then adds them to
// their writers' pending batches.
func (r *Replayer) queueOp(ctx context.Context, ts bson.Timestamp, items []routedItem) error {
	if len(items) == 0 {
		return nil
	}
	r.mark(ts, len(items))
	for _, it := range items {
		p := r.pending[it.writer]
		if p == nil {
			p = r.newBatch()
		}
		p = append(p, it.item)
		r.pending[it.writer] = p
		if len(p) >= r.o.Spec.Cache.BatchSize {
			if err := r.flush(ctx, it.writer); err != nil {
				return err
			}
		}
	}
	return nil
}

// route returns what to do with writes to a source namespace.
func (r *Replayer) route(ns string) route {
	if rt, ok := r.routes[ns]; ok {
		return rt
	}
	src := catalog.ParseNamespace(ns)
	rt := route{selected: r.o.Mapper.Selected(src)}
	if rt.selected {
		rt.target = r.o.Mapper.Target(src)
		rt.key = rt.target.String()
		r.mu.Lock()
		rt.serial = r.unique[rt.key]
		r.mu.Unlock()
	}
	if len(r.routes) >= maxRoutes {
		clear(r.routes)
	}
	// The key may share the bytes of a raw entry: keep a copy.
	r.routes[strings.Clone(ns)] = rt
	return rt
}

// bucket picks the writer for a write: by (namespace, document key), or by
// namespace alone for collections with a unique secondary index.
func (r *Replayer) bucket(rt route, docKey bson.Raw) int {
	var h maphash.Hash
	h.SetSeed(r.seed)
	_, _ = h.WriteString(rt.key)
	if !rt.serial {
		_, _ = h.Write(docKey)
	}
	return int(h.Sum64() % uint64(len(r.queues)))
}

// newBatch returns an empty batch, reused when a writer gave one back.
func (r *Replayer) newBatch() []item {
	select {
	case b := <-r.free:
		return b[:0]
	default:
		return make([]item, 0, min(r.o.Spec.Cache.BatchSize, 1024))
	}
}

// publish registers the marked positions with the watermark and shows the
// last position read in the status.
func (r *Replayer) publish() {
	r.wm.DispatchAll(r.marks)
	r.marks = r.marks[:0]
	r.mu.Lock()
	r.readTS = r.lastRead
	r.mu.Unlock()
}

// flush queues writer w's pending batch, charging its bytes to the budget.
func (r *Replayer) flush(ctx context.Context, w int) error {
	r.publish()
	b := r.pending[w]
	if len(b) == 0 {
		return nil
	}
	var n int64
	for i := range b {
		n += b[i].bytes
	}
	if err := r.budget.Acquire(ctx, n); err != nil {
		return err
	}
	select {
	case r.queues[w] <- b:
		r.pending[w] = nil
		return nil
	case <-ctx.Done():
		r.budget.Release(n)
		return ctx.Err()
	}
}

// flushAll queues every pending batch and registers every position read.
func (r *Replayer) flushAll(ctx context.Context) error {
	r.publish()
	for w := range r.pending {
		if err := r.flush(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// drain queues what is pending, then waits until every queued write is
// applied.
func (r *Replayer) drain(ctx, wctx context.Context) error {
	if err := r.flushAll(ctx); err != nil {
		return err
	}
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
		r.mu.Unlock()
	}()
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS, true); err != nil {
			return err
		}
		// One operation at a time: a transaction's writes may touch one
		// document twice, on any writer.
		if err := r.drain(ctx, wctx); err != nil {
			return err
		}
	}
	r.count("transaction", false)
	r.mark(unit.TS, 0)
	return nil
}

// barrierDDL drains the writers and applies a DDL command once.
func (r *Replayer) barrierDDL(ctx, wctx context.Context, ddl oplog.DDL, ts bson.Timestamp) error {
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	err := r.applyDDL(ctx, ddl)
	// The command may have changed names or unique indexes.
	clear(r.routes)
	if err != nil {
		return err
	}
	r.count("ddl", false)
	r.mark(ts, 0)
	return nil
}

// writer is one writer goroutine's reusable buffers.
type writer struct {
	window []item // up to cache.batchSize writes, in queue order
	carry  []item // a queued batch that did not fit the window
	models []mongo.WriteModel
	tss    []bson.Timestamp
}

// write applies one writer's queue: it merges queued batches into a window
// of up to cache.batchSize writes, then applies each run of consecutive
// writes to one namespace as one ordered bulk write. Runs keep the queue's
// order (a document's writes are all in one queue, in oplog order) and
// its batch sizes: FerretDB stalls on bulk writes of a few dozen
// operations from concurrent writers, so writes are not regrouped by
// namespace across the window.
func (r *Replayer) write(ctx context.Context, q chan []item) error {
	batchMax := r.o.Spec.Cache.BatchSize
	var w writer
	for {
		w.window = w.window[:0]
		if w.carry != nil {
			w.window = append(w.window, w.carry...)
			r.giveBack(w.carry)
			w.carry = nil
		} else {
			b, ok := <-q
			if !ok {
				return nil
			}
			w.window = append(w.window, b...)
			r.giveBack(b)
		}
	fill:
		for len(w.window) < batchMax {
			select {
			case b, ok := <-q:
				if !ok {
					break fill
				}
				if len(w.window)+len(b) > batchMax {
					w.carry = b
					break fill
				}
				w.window = append(w.window, b...)
				r.giveBack(b)
			default:
				break fill
			}
		}
		if err := r.applyWindow(ctx, &w); err != nil {
			return err
		}
	}
}

// giveBack returns an emptied batch for reuse.
func (r *Replayer) giveBack(b []item) {
	clear(b)
	select {
	case r.free <- b[:0]:
	default:
	}
}

// applyWindow applies a window run by run, then accounts for all of it at
// once: budget, watermark, counters and rate.
func (r *Replayer) applyWindow(ctx context.Context, w *writer) error {
	var (
		bytes  int64
		counts [8]int64 // by oplog.Kind
	)
	w.tss = w.tss[:0]
	for _, it := range w.window {
		bytes += it.bytes
		counts[it.kind%8]++
		w.tss = append(w.tss, it.ts)
	}
	run := w.window
	for len(run) > 0 {
		n := 1
		for n < len(run) && run[n].ns == run[0].ns {
			n++
		}
		if err := r.applyBatch(ctx, w, run[:n]); err != nil {
			r.budget.Release(bytes)
			return err
		}
		run = run[n:]
	}
	r.budget.Release(bytes)
	r.wm.DoneAll(w.tss)
	now := time.Now()
	r.mu.Lock()
	for k, c := range counts {
		if c > 0 {
			r.counts[oplog.Kind(k).String()] += c
		}
	}
	r.rate.add(len(w.window))
	r.lastAppliedWall = now
	r.mu.Unlock()
	clear(w.window)
	return nil
}

// applyTarget writes models to the target as one ordered bulk write.
func (r *Replayer) applyTarget(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
	_, err := r.o.Target.Database(ns.DB).Collection(ns.Coll).BulkWrite(ctx, models,
		options.BulkWrite().SetOrdered(true).SetBypassDocumentValidation(true))
	return err
}

// applyBatch writes a batch in order, retrying retryable errors and
// stepping over duplicate keys of the copy/replay overlap.
func (r *Replayer) applyBatch(ctx context.Context, w *writer, batch []item) error {
	apply := r.o.Apply
	if apply == nil {
		apply = r.applyTarget
	}
	backoff := 200 * time.Millisecond
	for attempt := 0; len(batch) > 0; attempt++ {
		w.models = w.models[:0]
		for i := range batch {
			w.models = append(w.models, batch[i].model)
		}
		var started time.Time
		if r.o.ObserveWrite != nil {
			started = time.Now()
		}
		err := apply(ctx, batch[0].ns, w.models)
		clear(w.models)
		if r.o.ObserveWrite != nil {
			r.o.ObserveWrite(batch[0].kind.String(), time.Since(started))
		}
		if err == nil {
			return nil
		}
		switch sink.Classify(err) {
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
			if it.ts.Compare(r.o.OverlapUntil) > 0 {
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
			return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
	}
	return nil
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
			}
		}
	}
}

// Checkpoint returns the position at or below which everything is on the
// target and no open or in-flight transaction begins.
func (r *Replayer) Checkpoint() bson.Timestamp {
	ts := r.wm.Applied()
	r.mu.Lock()
	if r.oldestOpen != nil {
		ts = minTS(ts, before(*r.oldestOpen))
	}
	if r.hold != nil {
		ts = minTS(ts, before(*r.hold))
	}
	r.mu.Unlock()
	return ts
}

func (r *Replayer) saveCheckpoint(ctx context.Context) error {
	ts := r.Checkpoint()
	r.mu.Lock()
	unchanged := ts.Compare(r.savedTS) <= 0
	r.mu.Unlock()
	if unchanged {
		return nil
	}
	if r.o.Store != nil {
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
