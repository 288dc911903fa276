package shardedsource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// A sharded source's per-shard copy (docs/sharded.md, "Per-shard copy";
// fullSync.shardedCopy perShard). The process that leads the copy
// (copyLeader) prepares each collection on the target, reads its chunk
// table and runs the passes (sourceshardcopy.Passes), saving each pass's table
// and ranges on the target; every process copies the passes' ranges of
// its own shards, leased per range (rangelease) so that a killed worker's
// range is taken over by its successor. A worker that does not lead finds
// the saved passes (follow) and copies its shard's part of each.

// helpAfter is how long a shard's part of a pass is left to its own
// worker before the others help with the ranges no worker holds: the
// lease's TTL, the time a silent holder keeps a range too.
const helpAfter = rangelease.DefaultTTL

// perShardCopy is the sharded source's fullsync.PerShard.
type perShardCopy struct {
	s       *Source
	leaser  *rangelease.Leaser
	writer  *sink.Writer
	limiter *rate.Limiter
	// copiers run per shard this process copies; batchBytes bounds each
	// one's batch, so that every copier's batch fits cache.maxBytes.
	copiers    int
	batchBytes int64

	mu       sync.Mutex
	followed map[sourceshardcopy.SavedPass]*followState // the saved passes this worker found
	// slot lets one shard's copiers run at a time in a worker of one
	// shard, its own shard's or another's it helps (help), so that their
	// batches fit cache.maxBytes; nil in a process running every shard.
	slot chan struct{}
}

// newPerShardCopy returns the per-shard copy of a sharded source read
// shard by shard, or nil when the task copies through mongos.
func (s *Source) newPerShardCopy() (*perShardCopy, error) {
	spec := &s.task.Spec
	if spec.Mode == config.ModeIncremental || spec.FullSync.ShardedCopy != config.ShardedCopyPerShard {
		return nil, nil
	}
	maxBytes, err := spec.Cache.MaxBytes.Bytes()
	if err != nil {
		return nil, fmt.Errorf("cache.maxBytes: %w", err)
	}
	// shards this process copies; processes copying at once (one per
	// shard under the operator), which share rateLimit.
	shards, processes := 1, len(s.subtaskList())
	if s.opts.Shard == "" {
		shards, processes = processes, 1
	}
	copiers := max(1, spec.Threads.Readers)
	p := &perShardCopy{
		s:          s,
		leaser:     rangelease.New(s.target.Database(spec.Checkpoint.Database), rangelease.Options{Task: s.task.Name, Owner: rangelease.Owner(), TTL: rangelease.DefaultTTL}),
		writer:     &sink.Writer{MaxRetries: 8, Log: s.baseLog, SerialUpdates: s.dstProfile.SerialUpdates},
		limiter:    fullsync.Limiter(spec, processes),
		copiers:    copiers,
		batchBytes: sourceshardcopy.BatchBytes(maxBytes, copiers*shards),
		followed:   map[sourceshardcopy.SavedPass]*followState{},
	}
	if s.opts.Shard != "" {
		p.slot = make(chan struct{}, 1)
	}
	return p, nil
}

// Takes reports whether coll is sharded on a ranged key: its chunk table
// reads through mongos. Anything else (unsharded, hashed, a table that
// does not read) is copied through mongos, which is always exact.
func (p *perShardCopy) Takes(ctx context.Context, coll catalog.Collection) (bool, int64, error) {
	ns := coll.Source.String()
	_, ok, err := sourceshardcopy.ReadTable(ctx, p.s.source, ns)
	switch {
	case ctx.Err() != nil:
		return false, 0, ctx.Err()
	case errors.Is(err, sourceshardcopy.ErrHashedKey):
		p.s.log.Info("copied through mongos: its shard key is hashed", "ns", ns)
		return false, 0, nil
	case err != nil:
		p.s.log.Warn("copied through mongos: its chunk table does not read", "ns", ns, "err", err)
		return false, 0, nil
	case !ok:
		return false, 0, nil
	}
	n, err := source.Estimate(ctx, p.s.source.Database(coll.Source.DB).Collection(coll.Source.Coll))
	if err != nil {
		return false, 0, err
	}
	return true, n, nil
}

// Copy runs the passes of coll (the leader's part): each shard this
// process runs is copied here, the others' parts are awaited.
func (p *perShardCopy) Copy(ctx context.Context, coll catalog.Collection, written func(docs, bytes int64)) error {
	s, ns := p.s, coll.Source.String()
	db := s.target.Database(s.task.Checkpoint.Database)
	var names []string
	for _, st := range s.subtaskList() {
		names = append(names, st.shard.Name)
	}
	passes := &sourceshardcopy.Passes{
		NS: ns, Shards: names, Log: s.log,
		Read: func(ctx context.Context) (*sourceshardcopy.Table, error) {
			t, ok, err := sourceshardcopy.ReadTable(ctx, s.source, ns)
			if err == nil && !ok {
				err = fmt.Errorf("%s is no longer sharded: run the task again", ns)
			}
			return t, err
		},
		Recipients: func(ctx context.Context, since time.Time) ([]string, error) {
			return sourceshardcopy.Recipients(ctx, s.source, ns, since)
		},
		Positions: s.shardPositions,
		Migrated: func(ctx context.Context, shard string, from bson.Timestamp) (bool, error) {
			return sourceshardcopy.Migrated(ctx, p.client(shard), shard, ns, from)
		},
		Plan: func(ctx context.Context, shard string, pass int) ([]sourceshardcopy.Range, error) {
			return sourceshardcopy.PlanShard(ctx, p.client(shard), shard, ns, pass, p.splitter())
		},
		Save: func(ctx context.Context, pass sourceshardcopy.Pass) (sourceshardcopy.Pass, error) {
			return sourceshardcopy.SavePass(ctx, db, s.task.Name, ns, pass)
		},
		Copy: func(ctx context.Context, shard string, _ int, table *sourceshardcopy.Table, ranges []sourceshardcopy.Range) error {
			if s.mine(shard) {
				return p.copyShard(ctx, shard, coll, table, ranges, written)
			}
			return p.await(ctx, shard, coll, table, ranges, written)
		},
	}
	res, err := passes.Run(ctx)
	if err != nil {
		return err
	}
	s.log.Info("copied shard by shard", "ns", ns, "passes", res.Passes, "shardsPerPass", fmt.Sprint(res.Shards))
	return nil
}

// client is shard's connection.
func (p *perShardCopy) client(shard string) *mongo.Client {
	p.s.subMu.Lock()
	defer p.s.subMu.Unlock()
	return p.s.subtasks[shard].client
}

// splitter plans a shard's ranges as the copy through mongos plans a
// collection's (fullSync.rangeDocuments and split).
func (p *perShardCopy) splitter() source.Splitter {
	fs := p.s.task.FullSync
	whole := fs.Split == config.SplitNever || (fs.Split == config.SplitAuto && !p.s.srcProfile.IndexedRangeReads)
	return source.Splitter{RangeDocuments: fs.RangeDocuments, Whole: whole}
}

// copyShard copies shard's ranges of a pass with this process's copiers
// until every range is recorded done.
func (p *perShardCopy) copyShard(ctx context.Context, shard string, coll catalog.Collection, table *sourceshardcopy.Table, ranges []sourceshardcopy.Range, written func(docs, bytes int64)) error {
	st, err := p.runCopiers(ctx, shard, coll, table, ranges, written, true)
	if st != nil {
		p.s.log.Info("copied a shard's part of a pass", "ns", coll.Source.String(), "shard", shard, "ranges", st.Ranges, "documents", st.Kept, "orphansLeftOut", st.Orphans, "rangesTakenOver", st.TakenOver, "rangesLost", st.Lost)
	}
	return err
}

// runCopiers runs this process's copiers over shard's ranges, holding the
// worker's slot: until every range is recorded done (all), or until none
// is left to claim. Its stats are nil when there was nothing to copy.
func (p *perShardCopy) runCopiers(ctx context.Context, shard string, coll catalog.Collection, table *sourceshardcopy.Table, ranges []sourceshardcopy.Range, written func(docs, bytes int64), all bool) (*sourceshardcopy.Stats, error) {
	if len(ranges) == 0 {
		return nil, nil
	}
	release, err := p.take(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	c := p.newCopier(shard, coll, written)
	g, gctx := errgroup.WithContext(ctx)
	for range min(p.copiers, len(ranges)) {
		g.Go(func() error {
			if all {
				return c.Copy(gctx, table, ranges)
			}
			_, err := c.CopyClaimable(gctx, table, ranges)
			return err
		})
	}
	err = g.Wait()
	st := c.Stats()
	return &st, err
}

// newCopier returns a copier of shard's ranges of coll, through its
// document filter when it has one.
func (p *perShardCopy) newCopier(shard string, coll catalog.Collection, written func(docs, bytes int64)) *sourceshardcopy.Copier {
	spec := &p.s.task.Spec
	var query bson.Raw
	if coll.Filter != nil {
		query = coll.Filter.Query()
	}
	return &sourceshardcopy.Copier{
		Query: query,
		Shard: shard, Source: p.client(shard), NS: coll.Source.String(),
		Target: p.s.target.Database(coll.Target.DB).Collection(coll.Target.Coll),
		Leaser: p.leaser, Writer: p.writer, BatchDocs: spec.Cache.BatchSize, BatchBytes: p.batchBytes,
		Conflict: spec.FullSync.OnConflict, Limiter: p.limiter, Written: written, ObserveWrite: p.s.opts.ObserveWrite,
	}
}

// take waits for the slot of a worker of one shard; release gives it
// back.
func (p *perShardCopy) take(ctx context.Context) (release func(), err error) {
	if p.slot == nil {
		return func() {}, nil
	}
	select {
	case p.slot <- struct{}{}:
		return func() { <-p.slot }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// help copies, in a worker of one shard whose own part of the pass is
// copied, the ranges of another shard's part that no worker holds: a
// collection that lives on one shard, a worker slower than the others,
// or a killed one's ranges once their leases went unrenewed for the TTL.
// It reads that shard directly, as its own worker does, and returns once
// nothing is left to claim, without waiting for ranges others hold.
func (p *perShardCopy) help(ctx context.Context, shard string, coll catalog.Collection, table *sourceshardcopy.Table, ranges []sourceshardcopy.Range, written func(docs, bytes int64)) error {
	if p.slot == nil {
		return nil
	}
	st, err := p.runCopiers(ctx, shard, coll, table, ranges, written, false)
	if st != nil && st.Ranges > 0 {
		p.s.log.Info("helped copy another shard's part of a pass", "ns", coll.Source.String(), "shard", shard, "ranges", st.Ranges, "documents", st.Kept, "orphansLeftOut", st.Orphans, "rangesTakenOver", st.TakenOver)
	}
	return err
}

// await waits until every range of another shard's part of a pass is
// recorded done, helping copy it (help) once the part is helpAfter old.
func (p *perShardCopy) await(ctx context.Context, shard string, coll catalog.Collection, table *sourceshardcopy.Table, ranges []sourceshardcopy.Range, written func(docs, bytes int64)) error {
	last, start := time.Time{}, time.Now()
	for {
		if time.Since(start) >= helpAfter {
			if err := p.help(ctx, shard, coll, table, ranges, written); err != nil {
				return err
			}
		}
		done, err := p.leaser.Done(ctx)
		if err != nil {
			return err
		}
		left := 0
		for _, r := range ranges {
			if _, ok := done[r.ID]; !ok {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Since(last) > 30*time.Second {
			p.s.log.Info("waiting for the worker of a shard to copy its part", "shard", shard, "rangesLeft", left, "ranges", len(ranges))
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// follow copies this worker's shard's part of every saved pass it has not
// copied yet: the part of the copy a worker that does not lead runs.
func (p *perShardCopy) follow(ctx context.Context) error {
	s := p.s
	db := s.target.Database(s.task.Checkpoint.Database)
	saved, err := sourceshardcopy.ListPasses(ctx, db, s.task.Name)
	if err != nil {
		return err
	}
	for _, sp := range saved {
		p.mu.Lock()
		st := p.followed[sp]
		if st == nil {
			st = &followState{seen: time.Now()}
			p.followed[sp] = st
		}
		p.mu.Unlock()
		if st.helped {
			continue
		}
		pass, err := sourceshardcopy.LoadPass(ctx, db, s.task.Name, sp.NS, sp.N)
		if err != nil {
			return err
		}
		if err := p.followPass(ctx, sp.NS, pass, st); err != nil {
			return err
		}
	}
	return nil
}

// followState is how far a worker that does not lead is with a saved
// pass: found when, its own part copied, the others' parts helped with.
type followState struct {
	seen           time.Time
	copied, helped bool
}

// followPass copies this worker's shard's part of a saved pass, then,
// once the pass is helpAfter old for this worker, helps with the other
// shards' parts that no worker holds (all of them when the collection
// lives on other shards only). follow calls it again until it helped.
func (p *perShardCopy) followPass(ctx context.Context, ns string, pass sourceshardcopy.Pass, st *followState) error {
	s := p.s
	src := catalog.ParseNamespace(ns)
	coll := catalog.Collection{Source: src, Target: s.mapper.Target(src), Type: "collection"}
	written := func(docs, bytes int64) { s.run.Copied(ns, coll.Target.String(), docs, bytes) }
	if !st.copied {
		s.run.SetPhase(workerapi.PhaseFullSync)
		if err := p.copyShard(ctx, s.opts.Shard, coll, pass.Table, pass.Ranges[s.opts.Shard], written); err != nil {
			return err
		}
		st.copied = true
	}
	if time.Since(st.seen) < helpAfter {
		return nil
	}
	for _, shard := range slices.Sorted(maps.Keys(pass.Ranges)) {
		if shard == s.opts.Shard {
			continue
		}
		if err := p.help(ctx, shard, coll, pass.Table, pass.Ranges[shard], written); err != nil {
			return err
		}
	}
	st.helped = true
	return nil
}
