// Package fullsync copies every selected collection once: Copier prepares
// the target collections, plans _id ranges, runs parallel readers and
// writers through the byte-bounded pipeline (on a sharded target, one
// command per owning shard through a Router), records each finished range
// so a restart skips it, and builds indexes; Status reports its progress.
package fullsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/pipeline"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// ErrTargetNotEmpty is returned before anything is written when
// onConflict is fail and a target collection already holds documents.
var ErrTargetNotEmpty = errors.New("target collection is not empty")

// Options are a Copier's parts.
type Options struct {
	Task           string
	Spec           *config.Spec
	Source, Target *mongo.Client
	Store          *checkpoint.Store
	Log            *slog.Logger
	// SourceProfile is the source server's profile (range reads).
	SourceProfile conn.Profile
	// TargetProfile is the target server's (how it takes index builds).
	TargetProfile conn.Profile
	// ObserveWrite, when set, is told the duration of every write batch.
	ObserveWrite func(time.Duration)
	// Hook, when set, is called after each batch is written (tests use it
	// to stop a copy midway).
	Hook func(docs int64)
	// ShardTarget, when set, shards a target collection after it is
	// created and before anything is written to it (a sharded target). It
	// returns a Router when it knows which target shard owns each
	// document (nil otherwise): each batch is then written as one command
	// per owning shard, the commands in parallel.
	ShardTarget func(ctx context.Context, coll catalog.Collection) (Router, error)
	// PerShard, when set, copies the collections it takes shard by shard
	// (a sharded source) instead of in _id ranges through Source.
	PerShard PerShard
	// Leaser, when set, shares the ranges read through Source with other
	// processes (copy-only workers, or a sharded source's shard workers):
	// each range is claimed through a lease on the target before it is
	// read (shared.go). Processes is how many copy at once (they share
	// rateLimit).
	Leaser    *rangelease.Leaser
	Processes int
	// OthersReport says the other processes' figures are summed by
	// whoever reads them (the operator, for its shard workers): the
	// progress then counts only what this process wrote, and ranges
	// others finished as done without their documents.
	OthersReport bool
}

// Router groups a batch's documents by the target shard that owns them.
type Router interface {
	Group(docs []bson.Raw) [][]bson.Raw
}

// Copier runs a full copy.
type Copier struct {
	opts     Options
	log      *slog.Logger
	mapper   *catalog.Mapper
	budget   *pipeline.Budget
	progress *progress
	writer   *sink.Writer
	limiter  *rate.Limiter
	// whole copies each new collection as one range (fullSync.split).
	whole bool
	// openRange, when set, replaces openSource (the write-side benchmark
	// reads from memory).
	openRange func(ctx context.Context, r checkpoint.Range, coll catalog.Collection) (rangeCursor, int, error)
	// batchBytes caps one batch; cursor buffers and writer buffers hold
	// about this much each, outside the queue budget.
	batchBytes int64
	// maxBytes is cache.maxBytes, which the budget and the batches share.
	maxBytes int64
	// routers are the ShardTarget routers by source namespace, set while
	// collections are prepared, before any write.
	routers map[string]Router
	// holder creates target collections and indexes with what changes
	// data on the target's own clock held back until cut-over.
	holder *holdback.Holder
	// helper is a helper's shared copy state, kept across HelpCopy calls
	// (each range counted once); waitLogged is when HelpCopy last logged
	// the ranges it waits for.
	helper     *shared
	waitLogged time.Time
}

// New builds a Copier. The byte budget is cache.maxBytes less one batch per
// reader (its cursor buffer) and one per writer (its encoded request), so
// documents held anywhere in the copy stay within cache.maxBytes.
func New(o Options) (*Copier, error) {
	mapper, err := catalog.NewMapper(o.Spec.Namespaces, o.Spec.Checkpoint.Database)
	if err != nil {
		return nil, err
	}
	maxBytes, err := o.Spec.Cache.MaxBytes.Bytes()
	if err != nil {
		return nil, fmt.Errorf("cache.maxBytes: %w", err)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	workers := int64(o.Spec.Threads.Readers + o.Spec.Threads.Writers)
	batchBytes := min(max(maxBytes/(2*workers), 256<<10), 16<<20)
	c := &Copier{
		opts:       o,
		log:        log.With("task", o.Task),
		mapper:     mapper,
		budget:     pipeline.NewBudget(maxBytes - workers*batchBytes),
		progress:   newProgress(),
		writer:     &sink.Writer{MaxRetries: 8, Log: log, SerialUpdates: o.TargetProfile.SerialUpdates},
		batchBytes: batchBytes,
		maxBytes:   maxBytes,
	}
	c.holder = holdback.NewHolder(o.Target, o.Spec.Checkpoint.Database, o.Task, log)
	if o.Spec.Mode == config.ModeFull {
		c.holder = holdback.Passthrough(o.Target)
	}
	c.limiter = Limiter(o.Spec, 1)
	return c, nil
}

// Limiter paces the copy of one of processes copying at once (copy-only
// workers, one worker per shard) at its share of rateLimit documents per
// second, so that rateLimit stays the task's ceiling; nil without a
// limit.
func Limiter(spec *config.Spec, processes int) *rate.Limiter {
	if spec.RateLimit <= 0 {
		return nil
	}
	n := int64(max(1, processes))
	share := max(1, (spec.RateLimit+n-1)/n)
	return rate.NewLimiter(rate.Limit(share), int(max(share, int64(spec.Cache.BatchSize))))
}

// Status returns a snapshot of the copy's progress.
func (c *Copier) Status() Status {
	s := c.progress.snapshot()
	s.BufferedBytes = c.budget.InUse()
	s.PeakBufferedBytes = c.budget.Peak()
	s.MaxBytes, s.QueueBudgetBytes = c.maxBytes, c.budget.Limit()
	return s
}

// Preflight runs the checks that must pass before anything is written:
// with onConflict fail (and no dropTarget), every target collection not yet
// planned must be empty.
func (c *Copier) Preflight(ctx context.Context) error {
	spec := c.opts.Spec
	if spec.FullSync.OnConflict != config.ConflictFail || spec.FullSync.DropTarget {
		return nil
	}
	colls, err := catalog.List(ctx, c.opts.Source, c.mapper)
	if err != nil {
		return err
	}
	plans, err := c.opts.Store.Plans(ctx)
	if err != nil {
		return err
	}
	var fresh []catalog.Collection
	for _, coll := range colls {
		if _, ok := plans[coll.Source.String()]; !ok {
			fresh = append(fresh, coll)
		}
	}
	return c.checkEmpty(ctx, fresh)
}

// Run copies everything the task selects. It is safe to call again after a
// crash: finished ranges are skipped, unfinished ones are copied again and
// documents an earlier attempt wrote are overwritten.
func (c *Copier) Run(ctx context.Context) error {
	spec := c.opts.Spec
	colls, err := catalog.List(ctx, c.opts.Source, c.mapper)
	if err != nil {
		return err
	}
	plans, err := c.opts.Store.Plans(ctx)
	if err != nil {
		return err
	}
	var fresh []catalog.Collection
	for _, coll := range colls {
		if _, ok := plans[coll.Source.String()]; !ok {
			fresh = append(fresh, coll)
		}
	}
	if spec.FullSync.OnConflict == config.ConflictFail && !spec.FullSync.DropTarget {
		if err := c.checkEmpty(ctx, fresh); err != nil {
			return err
		}
	}
	c.progress.start()
	if len(fresh) > 0 {
		c.whole = !c.splitRanges()
	}
	// Views last: their source collections exist by then.
	slices.SortStableFunc(fresh, func(a, b catalog.Collection) int {
		return boolRank(!a.Copyable()) - boolRank(!b.Copyable())
	})
	for _, coll := range fresh {
		if err := c.prepare(ctx, coll); err != nil {
			return err
		}
	}
	if plans, err = c.opts.Store.Plans(ctx); err != nil {
		return err
	}
	ranges, err := c.opts.Store.Ranges(ctx)
	if err != nil {
		return err
	}
	byNS := map[string]catalog.Collection{}
	for _, coll := range colls {
		byNS[coll.Source.String()] = coll
	}
	todo, perShard := splitPerShard(c.rangesToCopy(plans, ranges, byNS), plans)
	c.log.Info("full copy", "namespaces", len(plans), "ranges", len(ranges), "rangesToCopy", len(todo), "copiedShardByShard", len(perShard))
	copyRanges := c.copyRanges
	if c.opts.Leaser != nil {
		copyRanges = c.copyShared
	}
	if err := copyRanges(ctx, todo, byNS); err != nil {
		return err
	}
	if err := c.copyPerShard(ctx, perShard, byNS); err != nil {
		return err
	}
	if spec.FullSync.CopyIndexesEnabled() && spec.FullSync.IndexBuild == config.IndexesAfter {
		if err := c.buildIndexes(ctx, colls, plans); err != nil {
			return err
		}
	}
	c.progress.setStage("done")
	return nil
}

// rangesToCopy counts every planned namespace in the progress and returns
// the ranges not copied yet; the ranges already copied count as done.
func (c *Copier) rangesToCopy(plans map[string]checkpoint.Plan, ranges []checkpoint.Range, byNS map[string]catalog.Collection) []checkpoint.Range {
	var todo []checkpoint.Range
	for _, p := range plans {
		if _, ok := byNS[p.NS]; ok {
			c.progress.addNamespace(p.NS, byNS[p.NS].Target.String(), p.Estimated, p.Ranges)
		}
	}
	for _, r := range ranges {
		if _, ok := byNS[r.NS]; !ok {
			continue
		}
		if r.State == checkpoint.RangeDone {
			c.progress.rangeDone(r.NS, r.Docs, r.Bytes, true)
			continue
		}
		todo = append(todo, r)
	}
	return todo
}

// buildIndexes builds, after the copy, the indexes of each copied
// collection whose indexes are not built yet, and records each as built.
func (c *Copier) buildIndexes(ctx context.Context, colls []catalog.Collection, plans map[string]checkpoint.Plan) error {
	c.progress.setStage("building indexes")
	for _, coll := range colls {
		p := plans[coll.Source.String()]
		if p.IndexesBuilt || !coll.Copyable() {
			continue
		}
		if err := c.holder.CreateIndexes(ctx, coll, c.opts.TargetProfile.IndexesOneByOne); err != nil {
			return err
		}
		if err := c.opts.Store.MarkIndexesBuilt(ctx, coll.Source.String()); err != nil {
			return err
		}
	}
	return nil
}

// splitRanges reports whether new collections are split into _id ranges,
// as fullSync.split says. auto splits unless the source's profile says it
// reads _id ranges without its index (FerretDB): every range read would
// scan and decode the whole collection, and so would sampling _ids for
// boundaries, so one range per collection reads the source once instead
// of k+2 times.
func (c *Copier) splitRanges() bool {
	switch c.opts.Spec.FullSync.Split {
	case config.SplitAlways:
		return true
	case config.SplitNever:
		return false
	}
	if !c.opts.SourceProfile.IndexedRangeReads {
		c.log.Info("copying each collection as one range: the source (" + string(c.opts.SourceProfile.Flavor) + ") reads an _id range by scanning the whole collection, so ranges would multiply the reads; a collection interrupted midway is copied again from its start (fullSync.split: always splits anyway)")
		return false
	}
	return true
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkEmpty fails, naming every non-empty target collection, before
// anything is written.
func (c *Copier) checkEmpty(ctx context.Context, colls []catalog.Collection) error {
	var busy []string
	for _, coll := range colls {
		if !coll.Copyable() {
			continue
		}
		err := c.opts.Target.Database(coll.Target.DB).Collection(coll.Target.Coll).
			FindOne(ctx, bson.D{}, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
		case err != nil:
			return fmt.Errorf("check target %s: %w", coll.Target, err)
		default:
			busy = append(busy, coll.Target.String())
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("%w: %s; fullSync.onConflict is fail, so nothing was written: empty these collections, set fullSync.dropTarget: true, or set fullSync.onConflict to overwrite or skip",
			ErrTargetNotEmpty, strings.Join(busy, ", "))
	}
	return nil
}

// prepare creates one target collection and saves its range plan.
func (c *Copier) prepare(ctx context.Context, coll catalog.Collection) error {
	spec := c.opts.Spec
	tgt := c.opts.Target.Database(coll.Target.DB).Collection(coll.Target.Coll)
	if spec.FullSync.DropTarget {
		if err := tgt.Drop(ctx); err != nil {
			return fmt.Errorf("drop target %s: %w", coll.Target, err)
		}
		if err := c.holder.Dropped(ctx, coll.Target); err != nil {
			return err
		}
	}
	if err := c.holder.CreateCollection(ctx, coll, c.mapper); err != nil {
		return err
	}
	if c.opts.ShardTarget != nil && coll.Type == "collection" {
		c.progress.setStage("sharding " + coll.Target.String())
		router, err := c.opts.ShardTarget(ctx, coll)
		if err != nil {
			return err
		}
		if router != nil {
			if c.routers == nil {
				c.routers = map[string]Router{}
			}
			c.routers[coll.Source.String()] = router
		}
	}
	plan := checkpoint.Plan{NS: coll.Source.String()}
	if spec.FullSync.CopyIndexesEnabled() && spec.FullSync.IndexBuild == config.IndexesBefore && coll.Copyable() {
		if err := c.holder.CreateIndexes(ctx, coll, c.opts.TargetProfile.IndexesOneByOne); err != nil {
			return err
		}
		plan.IndexesBuilt = true
	}
	if perShard, err := c.preparePerShard(ctx, coll, plan); perShard || err != nil {
		return err
	}
	var ranges []checkpoint.Range
	if coll.Copyable() {
		c.progress.setStage("planning " + coll.Source.String())
		// A time series collection has no _id index to read ranges by.
		split := source.Splitter{RangeDocuments: spec.FullSync.RangeDocuments, Whole: c.whole || coll.Type == "timeseries"}
		rs, estimated, err := split.Split(ctx, c.opts.Source.Database(coll.Source.DB).Collection(coll.Source.Coll))
		if err != nil {
			return err
		}
		plan.Estimated = estimated
		for i, r := range rs {
			ranges = append(ranges, checkpoint.Range{Index: i, Filter: r.Filter, Describe: r.Describe})
		}
	}
	plan.Ranges = len(ranges)
	c.log.Info("planned", "ns", plan.NS, "target", coll.Target.String(), "ranges", plan.Ranges, "estimatedDocuments", plan.Estimated)
	return c.opts.Store.SavePlan(ctx, plan, ranges)
}

// copyRanges runs readers and writers over the ranges still to copy.
func (c *Copier) copyRanges(ctx context.Context, todo []checkpoint.Range, byNS map[string]catalog.Collection) error {
	if len(todo) == 0 {
		return nil
	}
	spec := c.opts.Spec
	c.progress.setStage("copying")
	queues := pipeline.NewQueues(spec.Cache.BucketNum, spec.Cache.BucketSize)
	tracker := newTracker()
	g, ctx := errgroup.WithContext(ctx)

	work := make(chan checkpoint.Range)
	g.Go(func() error {
		defer close(work)
		for _, r := range todo {
			select {
			case work <- r:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	var readers sync.WaitGroup
	for i := 0; i < spec.Threads.Readers; i++ {
		readers.Add(1)
		g.Go(func() error {
			defer readers.Done()
			for r := range work {
				if err := c.readRange(ctx, r, byNS[r.NS], queues, tracker, i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		readers.Wait()
		queues.Close()
		return nil
	})
	for i := 0; i < spec.Threads.Writers; i++ {
		g.Go(func() error { return c.writeBatches(ctx, queues, tracker, byNS) })
	}
	err := g.Wait()
	// Give back what was charged for batches nobody will write.
	for _, b := range tracker.drainUnwritten() {
		c.budget.Release(b)
	}
	return err
}

// readRange reads one range into batches.
func (c *Copier) readRange(ctx context.Context, r checkpoint.Range, coll catalog.Collection, queues *pipeline.Queues, tracker *tracker, reader int) error {
	// A range that was started before may be partly on the target already.
	own := r.State == checkpoint.RangeStarted
	if err := c.opts.Store.MarkStarted(ctx, r.ID); err != nil {
		return err
	}
	if own && c.opts.Spec.FullSync.OnConflict == config.ConflictFail {
		if err := c.clearInterrupted(ctx, r, coll); err != nil {
			return err
		}
	}
	tracker.begin(r, own)
	open := c.openRange
	if open == nil {
		open = c.openSource
	}
	cur, batchDocs, err := open(ctx, r, coll)
	if err != nil {
		return fmt.Errorf("read %s range %d: %w", r.NS, r.Index, err)
	}
	defer func() { _ = cur.Close(context.Background()) }()
	bucket := reader
	batch := &pipeline.Batch{Key: r.ID}
	flush := func() error {
		if len(batch.Docs) == 0 {
			return nil
		}
		tracker.pushed(r.ID, batch.Bytes)
		if err := queues.Push(ctx, bucket, batch); err != nil {
			return err
		}
		bucket++
		batch = &pipeline.Batch{Key: r.ID}
		return nil
	}
	for cur.Next(ctx) {
		doc := bson.Raw(slices.Clone(cur.Doc()))
		n := int64(len(doc))
		if batch.Bytes+n > c.batchBytes && len(batch.Docs) > 0 {
			if err := flush(); err != nil {
				return err
			}
		}
		if err := c.budget.Acquire(ctx, n); err != nil {
			return err
		}
		if c.limiter != nil {
			if err := c.limiter.Wait(ctx); err != nil {
				c.budget.Release(n)
				return err
			}
		}
		batch.Append(doc)
		if len(batch.Docs) >= batchDocs {
			if err := flush(); err != nil {
				c.budget.Release(batch.Bytes)
				return err
			}
		}
	}
	if err := cur.Err(); err != nil {
		c.budget.Release(batch.Bytes)
		return fmt.Errorf("read %s range %d: %w", r.NS, r.Index, err)
	}
	if err := flush(); err != nil {
		c.budget.Release(batch.Bytes)
		return err
	}
	if done, docs, bytes := tracker.readerFinished(r.ID); done {
		return c.finishRange(ctx, r, docs, bytes)
	}
	return nil
}

// clearInterrupted removes from the target what an interrupted attempt
// wrote in range r's _id span. The target was empty when the task started
// (Preflight), so whatever lies there was written by that attempt: the
// range is copied afresh rather than overwritten document by document. The
// range stays ours: an insert the interrupted process had sent may still
// land after the clear (a server finishes a dead client's command), and
// its documents are the source's, not a conflict.
func (c *Copier) clearInterrupted(ctx context.Context, r checkpoint.Range, coll catalog.Collection) error {
	tgt := c.opts.Target.Database(coll.Target.DB).Collection(coll.Target.Coll)
	if _, err := tgt.DeleteMany(ctx, r.Filter); err != nil {
		return fmt.Errorf("clear the interrupted range %d of %s on the target: %w", r.Index, coll.Target, err)
	}
	return nil
}

// rangeCursor iterates over the documents of one range. Doc is valid until
// the next call of Next.
type rangeCursor interface {
	Next(ctx context.Context) bool
	Doc() bson.Raw
	Err() error
	Close(ctx context.Context) error
}

// openSource opens a range on the source and says how many documents a
// write batch holds (cache.batchSize, fewer for large documents).
func (c *Copier) openSource(ctx context.Context, r checkpoint.Range, coll catalog.Collection) (rangeCursor, int, error) {
	// At majority read concern, as the per-shard and the shared copy read:
	// a copy never holds a write a failover of the source rolls back (its
	// undoing logs no entry for replay to apply).
	src := c.opts.Source.Database(coll.Source.DB).Collection(coll.Source.Coll, options.Collection().SetReadConcern(readconcern.Majority()))
	// Write batches hold cache.batchSize documents (fewer when that many
	// would pass one batch's share of the budget), and the cursor's
	// batches hold as many: no driver prefetches a cursor's next batch,
	// so while writers insert one batch the server reads the next, and a
	// copy waits for one batch before its first write and after its last
	// read, not for 16 MiB (on FerretDB, which decodes every document it
	// returns, a first batch of 14000 documents of 1.1 KB took 9 s to
	// arrive on a busy machine, one of 1000 0.4 s).
	batchDocs := catalog.BatchSizeFor(ctx, src, c.batchBytes, c.opts.Spec.Cache.BatchSize)
	cur, err := src.Find(ctx, coll.RangeQuery(r.Filter), options.Find().SetBatchSize(batchDocs))
	if err != nil {
		return nil, 0, err
	}
	return mongoCursor{cur}, int(batchDocs), nil
}

// mongoCursor is a driver cursor as a rangeCursor.
type mongoCursor struct{ *mongo.Cursor }

func (m mongoCursor) Doc() bson.Raw { return m.Current }

// writeBatches writes batches until the queues are drained.
func (c *Copier) writeBatches(ctx context.Context, queues *pipeline.Queues, tracker *tracker, byNS map[string]catalog.Collection) error {
	for {
		b, err := queues.Pop(ctx, nil)
		if err != nil || b == nil {
			return err
		}
		r, own := tracker.rangeOf(b.Key)
		coll := byNS[r.NS]
		tgt := c.opts.Target.Database(coll.Target.DB).Collection(coll.Target.Coll)
		started := time.Now()
		res, err := c.insert(ctx, tgt, c.routers[r.NS], b.Docs, own)
		if c.opts.ObserveWrite != nil {
			c.opts.ObserveWrite(time.Since(started))
		}
		c.budget.Release(b.Bytes)
		tracker.written(b.Key, b.Bytes)
		if err != nil {
			return fmt.Errorf("copy %s: %w", r.NS, err)
		}
		c.progress.batchWritten(r.NS, int64(len(b.Docs)), b.Bytes, res)
		if c.opts.Hook != nil {
			c.opts.Hook(int64(len(b.Docs)))
		}
		if done, docs, bytes := tracker.batchDone(b.Key, int64(len(b.Docs)), b.Bytes); done {
			if err := c.finishRange(ctx, r, docs, bytes); err != nil {
				return err
			}
		}
	}
}

// insert writes one batch: as one command, or, on a sharded target whose
// chunk layout is known, as one command per owning shard, in parallel.
func (c *Copier) insert(ctx context.Context, tgt *mongo.Collection, router Router, docs []bson.Raw, own bool) (sink.Result, error) {
	policy := c.opts.Spec.FullSync.OnConflict
	var groups [][]bson.Raw
	if router != nil {
		groups = router.Group(docs)
	}
	if len(groups) < 2 {
		return c.writer.Insert(ctx, tgt, docs, policy, own)
	}
	results := make([]sink.Result, len(groups))
	g, gctx := errgroup.WithContext(ctx)
	for i, group := range groups {
		g.Go(func() error {
			var err error
			results[i], err = c.writer.Insert(gctx, tgt, group, policy, own)
			return err
		})
	}
	err := g.Wait()
	var sum sink.Result
	for _, r := range results {
		sum.Inserted += r.Inserted
		sum.Overwritten += r.Overwritten
		sum.Skipped += r.Skipped
		sum.Retries += r.Retries
	}
	return sum, err
}

func (c *Copier) finishRange(ctx context.Context, r checkpoint.Range, docs, bytes int64) error {
	if err := c.opts.Store.MarkDone(ctx, r.ID, docs, bytes); err != nil {
		return err
	}
	c.progress.rangeDone(r.NS, docs, bytes, false)
	return nil
}
