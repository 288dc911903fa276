package sourceshardcopy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Range is one _id range of a shard's pass: ID names it in the range
// leases (RangeID), Filter selects its documents on the shard.
type Range struct {
	ID     string
	Filter bson.Raw
}

// RangeID names range i of ns on shard in pass: every pass of every shard
// has its own ranges, leased and recorded done apart.
func RangeID(ns, shard string, pass, i int) string {
	return fmt.Sprintf("%s/%s/p%d/%06d", ns, shard, pass, i)
}

// PlanShard splits ns as shard (read through its own client) holds it
// into ranges as split says, named for pass. Every worker of the pass
// must copy the same plan: plan once and hand it out (SavePass).
func PlanShard(ctx context.Context, shard *mongo.Client, name, ns string, pass int, split source.Splitter) ([]Range, error) {
	n := catalog.ParseNamespace(ns)
	rs, _, err := split.Split(ctx, shard.Database(n.DB).Collection(n.Coll))
	if err != nil {
		return nil, fmt.Errorf("plan %s on %s: %w", ns, name, err)
	}
	out := make([]Range, len(rs))
	for i, r := range rs {
		out[i] = Range{ID: RangeID(ns, name, pass, i), Filter: r.Filter}
	}
	return out, nil
}

// BatchBytes is the batch size of each of copiers copiers of one process
// within maxBytes (cache.maxBytes): a copier holds at most three batches,
// so every copier's fit; between 256 KiB and 16 MiB.
func BatchBytes(maxBytes int64, copiers int) int64 {
	return min(max(maxBytes/int64(3*max(1, copiers)), 256<<10), 16<<20)
}

// ErrStopped is what a Copier's Hook returns to stop it at once, as a
// killed worker stops: no renewal, no done record.
var ErrStopped = errors.New("copier stopped")

// Copier copies one shard's ranges of one collection: it reads the shard
// directly (read concern majority), keeps the documents the pass's table
// gives to the shard (orphans left out; with no table, a replica set's
// ranges shared by copy-only workers, every document), writes them to the target
// (existing ones overwritten: a later pass's version, or an earlier
// attempt's), reading the next batch while it writes one, renews its
// lease every RenewEvery and records each range done once.
type Copier struct {
	// Shard is the shard's name in config.shards (empty for a source
	// that is not sharded); Source its client.
	Shard  string
	Source *mongo.Client
	// NS is the source namespace; Target the target collection.
	NS     string
	Target *mongo.Collection
	// Query, when set, is the namespace's document filter
	// (namespaces.filters): each range is read as {$and: [range, Query]},
	// so only the matching documents reach the target.
	Query  bson.Raw
	Leaser *rangelease.Leaser
	Writer *sink.Writer
	// BatchDocs and BatchBytes bound a write batch (100 documents and
	// 8 MiB when zero): a copier holds at most three batches at a time.
	BatchDocs  int
	BatchBytes int64
	// Poll is how long to wait for a range another worker holds (1s
	// when zero): its holder finishes or goes silent for the TTL.
	Poll time.Duration
	// RenewEvery is how often the lease is renewed while the range is
	// read and written (1s when zero); keep it well under the lease's TTL.
	RenewEvery time.Duration
	// StallAfter is how long a range's read may go without reading a
	// document before its lease is no longer renewed, so that another
	// worker takes it over (10 minutes when zero).
	StallAfter time.Duration
	// Conflict is how a document already on the target is written:
	// overwritten (config.ConflictOverwrite, when empty) or left as it is
	// (config.ConflictSkip, fullSync.onConflict skip). A pass always
	// meets documents an earlier attempt or pass wrote.
	Conflict config.ConflictPolicy
	// Limiter, when set, paces the documents written (rateLimit): shared
	// by every copier of the process.
	Limiter *rate.Limiter
	// Claimed, when set, is called once a range is claimed, before
	// anything of it is read or written; an error stops the copy with it.
	// The shared copy records the range started there, so that a range
	// holding documents is never still pending in the checkpoint.
	Claimed func(ctx context.Context, r Range) error
	// Hook, when set, is called after each batch is written; an error
	// stops the copy with it (tests kill a copier mid-range).
	Hook func(r Range, docs int) error
	// Written, when set, is told each batch written (progress).
	Written func(docs, bytes int64)
	// ObserveWrite, when set, is told how long each batch's write took
	// (the write latency metric).
	ObserveWrite func(time.Duration)
	// Finished, when set, is told each range this copier recorded done,
	// with the documents and bytes it wrote.
	Finished func(r Range, docs, bytes int64)

	stats copierStats
}

// copierStats are a copier's counts, read while it runs.
type copierStats struct {
	kept, orphans, ranges, lost, takenOver atomic.Int64
}

// Stats are a copier's counts.
type Stats struct {
	// Kept documents were written; Orphans read and left out.
	Kept, Orphans int64
	// Ranges were copied to their end and recorded done by this copier;
	// Lost were given up on ErrLeaseLost; TakenOver were claimed from a
	// holder silent for the lease's TTL (a killed worker's).
	Ranges, Lost, TakenOver int64
}

// Stats returns the copier's counts so far.
func (c *Copier) Stats() Stats {
	return Stats{Kept: c.stats.kept.Load(), Orphans: c.stats.orphans.Load(), Ranges: c.stats.ranges.Load(), Lost: c.stats.lost.Load(), TakenOver: c.stats.takenOver.Load()}
}

// Copy copies ranges, filtered by table, until every one of them is
// recorded done (by this copier or another).
func (c *Copier) Copy(ctx context.Context, table *Table, ranges []Range) error {
	for {
		open, err := c.CopyClaimable(ctx, table, ranges)
		if err != nil || open == 0 {
			return err
		}
		if err := sleep(ctx, c.poll()); err != nil {
			return err
		}
	}
}

// CopyClaimable copies ranges, filtered by table (nil keeps every
// document: a source that is not sharded), for as long as one can be
// claimed, and returns how many are still not done: held by other
// workers, which finish them or go silent for the lease's TTL.
func (c *Copier) CopyClaimable(ctx context.Context, table *Table, ranges []Range) (int, error) {
	ids := make([]string, len(ranges))
	byID := make(map[string]Range, len(ranges))
	for i, r := range ranges {
		ids[i], byID[r.ID] = r.ID, r
	}
	for {
		lease, open, err := c.Leaser.Claim(ctx, ids)
		if err != nil || lease == nil {
			return open, err
		}
		r := byID[lease.Range]
		if lease.TakenOver {
			c.stats.takenOver.Add(1)
		}
		var docs, bytes int64
		if c.Claimed != nil {
			err = c.Claimed(ctx, r)
		}
		if err == nil {
			docs, bytes, err = c.copyRange(ctx, table, r, lease)
		}
		if err == nil {
			err = c.Leaser.Finish(ctx, lease, docs, bytes)
		}
		switch {
		case errors.Is(err, rangelease.ErrLeaseLost):
			c.stats.lost.Add(1)
		case err != nil:
			return open, fmt.Errorf("copy %s%s, range %s: %w", c.NS, c.onShard(), lease.Range, err)
		default:
			c.stats.ranges.Add(1)
			if c.Finished != nil {
				c.Finished(r, docs, bytes)
			}
		}
	}
}

// onShard names the copier's shard for messages.
func (c *Copier) onShard() string {
	if c.Shard == "" {
		return ""
	}
	return " on " + c.Shard
}

func (c *Copier) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// copyRange copies one leased range and returns how many documents (and
// bytes) it kept. One goroutine reads and filters the next batch while another
// writes the one before: a copier holds at most three batches (the one
// read, one waiting, the one written).
func (c *Copier) copyRange(ctx context.Context, table *Table, r Range, lease *rangelease.Lease) (int64, int64, error) {
	b := c.newBatcher(r, lease)
	batches := make(chan []bson.Raw, 1)
	g, gctx := errgroup.WithContext(ctx)
	read := make(chan struct{})
	g.Go(func() error {
		defer close(read)
		defer close(batches)
		return c.readRange(gctx, table, r, b, batches)
	})
	g.Go(func() error { return b.heartbeat(gctx, read) })
	g.Go(func() error {
		for docs := range batches {
			if err := b.write(gctx, docs); err != nil {
				return err
			}
		}
		return nil
	})
	err := g.Wait()
	return b.kept.Load(), b.keptBytes.Load(), err
}

// readRange reads r from the shard, leaves orphans out and sends the kept
// documents on in batches bounded by count and bytes.
func (c *Copier) readRange(ctx context.Context, table *Table, r Range, b *batcher, out chan<- []bson.Raw) error {
	n := catalog.ParseNamespace(c.NS)
	src := c.Source.Database(n.DB).Collection(n.Coll, options.Collection().SetReadConcern(readconcern.Majority()))
	var filter any = r.Filter
	if c.Query != nil {
		filter = bson.D{{Key: "$and", Value: bson.A{r.Filter, c.Query}}}
	}
	cur, err := src.Find(ctx, filter, options.Find().SetBatchSize(int32(b.maxDocs)))
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var docs []bson.Raw
	var bytes int64
	send := func() error {
		if len(docs) == 0 {
			return nil
		}
		select {
		case out <- docs:
		case <-ctx.Done():
			return ctx.Err()
		}
		docs, bytes = nil, 0
		return nil
	}
	for cur.Next(ctx) {
		b.progressed()
		if table != nil && !table.Owns(c.Shard, cur.Current) {
			c.stats.orphans.Add(1)
			if err := b.renewDue(ctx); err != nil {
				return err
			}
			continue
		}
		if bytes+int64(len(cur.Current)) > b.maxBytes {
			if err := send(); err != nil {
				return err
			}
		}
		docs = append(docs, slices.Clone(cur.Current))
		bytes += int64(len(cur.Current))
		if len(docs) >= b.maxDocs {
			if err := send(); err != nil {
				return err
			}
		}
	}
	if err := cur.Err(); err != nil {
		return err
	}
	return send()
}

// batcher writes one range's batches and renews the range's lease at
// least every RenewEvery, from the writer or from the reader while it
// skips orphans.
type batcher struct {
	c          *Copier
	r          Range
	maxDocs    int
	maxBytes   int64
	kept       atomic.Int64
	keptBytes  atomic.Int64
	renewEvery time.Duration
	mu         sync.Mutex // guards lease and renewed
	lease      *rangelease.Lease
	renewed    time.Time
	// lastProgress is when the range last read or wrote a document
	// (unix nanoseconds).
	lastProgress atomic.Int64
	stallAfter   time.Duration
}

// progressed records that the range read or wrote a document now.
func (b *batcher) progressed() { b.lastProgress.Store(time.Now().UnixNano()) }

// heartbeat renews the lease every RenewEvery for as long as the range is
// read (until read is closed; the writer renews while it writes the last
// batches), so that a holder whose read is slow to return a batch (a
// FerretDB source scans the whole collection for each range, seconds on a
// busy host) is not taken for a killed one after the TTL and its range
// read again from the start by another worker, over and over. A process
// frozen or cut off renews nothing, as before. A read that has made no
// progress for StallAfter stops renewing, so that another worker takes the
// range over from a copier stuck in a call that never returns.
func (b *batcher) heartbeat(ctx context.Context, read <-chan struct{}) error {
	t := time.NewTicker(b.renewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-read:
			return nil
		case <-t.C:
			if time.Since(time.Unix(0, b.lastProgress.Load())) > b.stallAfter {
				continue
			}
			if err := b.renewDue(ctx); err != nil {
				return err
			}
		}
	}
}

func (c *Copier) newBatcher(r Range, lease *rangelease.Lease) *batcher {
	b := &batcher{c: c, r: r, lease: lease, maxDocs: c.BatchDocs, maxBytes: c.BatchBytes, renewEvery: c.RenewEvery, renewed: time.Now(), stallAfter: c.StallAfter}
	b.progressed()
	if b.stallAfter <= 0 {
		b.stallAfter = 10 * time.Minute
	}
	if b.maxDocs <= 0 {
		b.maxDocs = 100
	}
	if b.maxBytes <= 0 {
		b.maxBytes = 8 << 20
	}
	if b.renewEvery <= 0 {
		b.renewEvery = time.Second
	}
	return b
}

// write writes a batch (existing documents overwritten unless Conflict
// is skip), paced by the Limiter, and renews the lease when due.
func (b *batcher) write(ctx context.Context, docs []bson.Raw) error {
	n := len(docs)
	if b.c.Limiter != nil {
		if err := b.c.Limiter.WaitN(ctx, min(n, b.c.Limiter.Burst())); err != nil {
			return err
		}
	}
	// The lease before every write: a copier frozen past the TTL whose
	// range went to another attempt stops here instead of writing what
	// it read before that attempt did.
	if err := b.checkLease(ctx); err != nil {
		return err
	}
	// own: an earlier attempt or pass may have written these documents.
	conflict, own := config.ConflictOverwrite, true
	if b.c.Conflict == config.ConflictSkip {
		conflict, own = config.ConflictSkip, false
	}
	started := time.Now()
	_, err := b.c.Writer.Insert(ctx, b.c.Target, docs, conflict, own)
	if b.c.ObserveWrite != nil {
		b.c.ObserveWrite(time.Since(started))
	}
	if err != nil {
		return err
	}
	var bytes int64
	for _, d := range docs {
		bytes += int64(len(d))
	}
	if b.c.Written != nil {
		b.c.Written(int64(n), bytes)
	}
	b.progressed()
	b.kept.Add(int64(n))
	b.keptBytes.Add(bytes)
	b.c.stats.kept.Add(int64(n))
	if b.c.Hook != nil {
		if err := b.c.Hook(b.r, n); err != nil {
			return err
		}
	}
	return nil
}

// checkLease renews the lease when due, else checks that it is still
// this copier's.
func (b *batcher) checkLease(ctx context.Context) error {
	b.mu.Lock()
	due := time.Since(b.renewed) >= b.renewEvery
	b.mu.Unlock()
	if due {
		return b.renewDue(ctx)
	}
	return b.c.Leaser.Check(ctx, b.lease)
}

// renewDue renews the lease when the last renewal is RenewEvery old.
func (b *batcher) renewDue(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.renewed) < b.renewEvery {
		return nil
	}
	b.renewed = time.Now()
	return b.c.Leaser.Renew(ctx, b.lease)
}
