package sourceshardcopy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// standInTable reads the table as ReadTable does, with the stand-in's
// outer bounds made MinKey and MaxKey (FerretDB refuses those values).
func standInTable(c *testserver.Cluster, ns string) func(ctx context.Context) (*sourceshardcopy.Table, error) {
	return func(ctx context.Context) (*sourceshardcopy.Table, error) {
		l, ok, err := targetsharding.ReadLayout(ctx, c.RouterClient(), ns)
		if err != nil || !ok {
			return nil, fmt.Errorf("%s not sharded (%v)", ns, err)
		}
		for i := range l.Chunks {
			l.Chunks[i].Min, l.Chunks[i].Max = testserver.RealBound(l.Chunks[i].Min), testserver.RealBound(l.Chunks[i].Max)
		}
		return sourceshardcopy.FromLayout(l)
	}
}

// TestPassesWithMovesAndKill copies a collection of the 3-shard stand-in
// shard by shard while the balancer moves chunks in both directions (one
// of them empty) during pass 0, with two orphans planted on a shard (one
// a stale copy of a live document, one of a document that no longer
// exists) and one shard's copier killed mid-range (its replacement takes
// the range over after the lease's TTL). Each pass's table and plans are
// saved on the target and every copier loads them. The target must equal
// the router's view, byte for byte; every range of every pass is
// recorded done once and copied to its end once.
//
// Migrations leave their documents on the donor (Cluster.KeepOrphans)
// until a range deleter run during pass 0; one chunk moved before the
// copy and one of its documents changed on the recipient, so the donor's
// orphan of it is stale. What the stand-in cannot show: there is no live
// load here: writes during the copy reach the target by replay from the
// start positions (test/shardsim and the sharded e2e tests check that).
func TestPassesWithMovesAndKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(3*time.Minute))
	defer cancel()
	c := testserver.StartCluster(t, 3)
	c.ChunkSize = 200
	c.KeepOrphans = true // donors keep their copies until the range deleter runs
	const ns = "app.c"
	var docs []bson.D
	for k := int64(0); k < 3000; k += 5 {
		docs = append(docs, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: k * 2}, {Key: "pad", Value: "document"}})
	}
	if err := c.Insert(ctx, ns, docs...); err != nil {
		t.Fatal(err)
	}
	// Before the copy: [600,800) moves from shard0 to shard1 and one of
	// its documents changes there: shard0 keeps stale orphans of it.
	if _, err := c.MoveChunk(ctx, ns, 600, 800, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, 600, bson.D{{Key: "v", Value: "changed after the move"}}); err != nil {
		t.Fatal(err)
	}
	// Orphans planted on shard1 in chunk [0,200), which shard0 owns,
	// outside any range the range deleter knows of.
	orphans := []any{bson.D{{Key: "_id", Value: int64(50)}, {Key: "v", Value: "stale orphan"}}, bson.D{{Key: "_id", Value: int64(51)}, {Key: "v", Value: "deleted since"}}}
	if _, err := c.ShardClient(1).Database("app").Collection("c").InsertMany(ctx, orphans); err != nil {
		t.Fatal(err)
	}
	tgtClient := testserver.Start(t).MustClient(t)
	target := tgtClient.Database("app").Collection("c")
	meta := tgtClient.Database("mongoferry")

	var moves, deleter sync.Once
	var deleterErr error
	var moveErr error
	var beforeMoves map[string]bson.Timestamp
	copies := map[string]*atomic.Int32{}
	var mu sync.Mutex
	var stats []sourceshardcopy.Stats
	var killed atomic.Bool
	copier := func(shard string, i int, owner string) *sourceshardcopy.Copier {
		return &sourceshardcopy.Copier{Shard: shard, Source: c.ShardClient(i), NS: ns, Target: target, BatchDocs: 20, Poll: 200 * time.Millisecond,
			Writer:   &sink.Writer{MaxRetries: 3},
			Finished: func(r sourceshardcopy.Range, _, _ int64) { mu.Lock(); copies[r.ID].Add(1); mu.Unlock() },
			Leaser:   rangelease.New(meta, rangelease.Options{Task: "t", Owner: owner, TTL: time.Second})}
	}
	p := &sourceshardcopy.Passes{
		NS: ns, Shards: c.Names, Read: standInTable(c, ns),
		Recipients: func(ctx context.Context, since time.Time) ([]string, error) {
			return sourceshardcopy.Recipients(ctx, c.RouterClient(), ns, since)
		},
		Positions: func(ctx context.Context) (map[string]bson.Timestamp, error) { return positions(ctx, c) },
		Migrated: func(ctx context.Context, shard string, from bson.Timestamp) (bool, error) {
			return sourceshardcopy.Migrated(ctx, c.ShardClient(index(c, shard)), shard, ns, from)
		},
		Plan: func(ctx context.Context, shard string, pass int) ([]sourceshardcopy.Range, error) {
			rs, err := sourceshardcopy.PlanShard(ctx, c.ShardClient(index(c, shard)), shard, ns, pass, source.Splitter{RangeDocuments: 60})
			mu.Lock()
			for _, r := range rs {
				copies[r.ID] = &atomic.Int32{}
			}
			mu.Unlock()
			return rs, err
		},
		Save: func(ctx context.Context, p sourceshardcopy.Pass) (sourceshardcopy.Pass, error) {
			return sourceshardcopy.SavePass(ctx, meta, "t", ns, p)
		},
		Copy: func(ctx context.Context, shard string, pass int, _ *sourceshardcopy.Table, _ []sourceshardcopy.Range) error {
			// Every worker loads the pass the leader saved.
			saved, err := sourceshardcopy.LoadPass(ctx, meta, "t", ns, pass)
			if err != nil {
				return err
			}
			table, ranges := saved.Table, saved.Ranges[shard]
			i := index(c, shard)
			w := copier(shard, i, shard+"-a")
			w.Hook = func(r sourceshardcopy.Range, _ int) error {
				if pass == 0 && shard == "shard0" {
					// The balancer, during pass 0: a chunk shard0 may
					// not have read yet leaves it, one comes to it, and
					// an empty one moves.
					moves.Do(func() {
						if beforeMoves, moveErr = positions(ctx, c); moveErr != nil {
							return
						}
						for _, m := range [][3]int64{{400, 600, 1}, {200, 400, 0}, {5000, 5200, 2}} {
							if _, err := c.MoveChunk(ctx, ns, m[0], m[1], int(m[2])); err != nil {
								moveErr = err
							}
						}
					})
				}
				if pass == 0 && shard == "shard2" {
					// A range deleter run during the copy.
					deleter.Do(func() { deleterErr = c.RunRangeDeleter(ctx) })
				}
				if pass == 0 && shard == "shard1" && killed.CompareAndSwap(false, true) {
					return sourceshardcopy.ErrStopped
				}
				return nil
			}
			err = w.Copy(ctx, table, ranges)
			if errors.Is(err, sourceshardcopy.ErrStopped) {
				w2 := copier(shard, i, shard+"-b") // the replacement worker
				err = w2.Copy(ctx, table, ranges)
				mu.Lock()
				stats = append(stats, w2.Stats())
				mu.Unlock()
			}
			mu.Lock()
			stats = append(stats, w.Stats())
			mu.Unlock()
			return err
		},
	}
	res, err := p.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moveErr != nil || deleterErr != nil {
		t.Fatal(moveErr, deleterErr)
	}
	left, err := c.Orphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !killed.Load() {
		t.Fatal("no copier was killed")
	}
	if res.Passes < 2 {
		t.Errorf("%d passes, want a settling pass after the moves during pass 0", res.Passes)
	}
	assertSame(ctx, t, c.RouterClient().Database("app").Collection("c"), target)
	// Every shard received a chunk during pass 0 (shard2 an empty one):
	// each one's oplog markers say so, for this collection only.
	for i, name := range c.Names {
		for _, tc := range []struct {
			ns   string
			want bool
		}{{ns, true}, {"app.other", false}} {
			got, err := sourceshardcopy.Migrated(ctx, c.ShardClient(i), name, tc.ns, beforeMoves[name])
			if err != nil || got != tc.want {
				t.Errorf("Migrated(%s, %s) = %v, %v; want %v", name, tc.ns, got, err, tc.want)
			}
		}
	}
	done, err := rangelease.New(meta, rangelease.Options{Task: "t"}).Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	takenOver := 0
	for id, n := range copies {
		if _, ok := done[id]; !ok {
			t.Errorf("range %s not recorded done", id)
		}
		if got := n.Load(); got != 1 {
			t.Errorf("range %s copied to its end %d times, want 1", id, got)
		}
		if done[id].Attempt > 1 {
			takenOver++
		}
	}
	if takenOver != 1 {
		t.Errorf("%d ranges taken over, want 1 (the killed copier's)", takenOver)
	}
	var sum sourceshardcopy.Stats
	for _, s := range stats {
		sum.Kept, sum.Orphans, sum.Ranges, sum.Lost = sum.Kept+s.Kept, sum.Orphans+s.Orphans, sum.Ranges+s.Ranges, sum.Lost+s.Lost
		sum.TakenOver += s.TakenOver
	}
	if sum.TakenOver != 1 {
		t.Errorf("the copiers' stats count %d ranges taken over, want 1", sum.TakenOver)
	}
	if sum.Orphans < 2 {
		t.Errorf("%d documents left out as orphans, want at least the 2 planted", sum.Orphans)
	}
	t.Logf("%d passes reading %v: %d ranges recorded done once each (%d copied by this test's copiers, 1 taken over), %d documents written, %d orphans left out, %d orphans still on the donors; target equals the router's %d documents",
		res.Passes, res.Shards, len(done), sum.Ranges, sum.Kept, sum.Orphans, left, len(docs))
}

// positions returns every shard's newest oplog ts.
func positions(ctx context.Context, c *testserver.Cluster) (map[string]bson.Timestamp, error) {
	out := map[string]bson.Timestamp{}
	for i, name := range c.Names {
		ts, err := source.NewestTS(ctx, c.ShardClient(i))
		if err != nil {
			return nil, err
		}
		out[name] = ts
	}
	return out, nil
}

func index(c *testserver.Cluster, shard string) int {
	for i, n := range c.Names {
		if n == shard {
			return i
		}
	}
	return -1
}

// assertSame fails unless both collections hold the same documents, byte
// for byte.
func assertSame(ctx context.Context, t *testing.T, want, got *mongo.Collection) {
	t.Helper()
	read := func(c *mongo.Collection) []bson.Raw {
		cur, err := c.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.Raw
		for cur.Next(ctx) {
			out = append(out, append(bson.Raw(nil), cur.Current...))
		}
		return out
	}
	w, g := read(want), read(got)
	if len(w) != len(g) {
		t.Fatalf("target holds %d documents, the router %d", len(g), len(w))
	}
	for i := range w {
		if !bytes.Equal(w[i], g[i]) {
			t.Fatalf("document %d: target %s, router %s", i, g[i], w[i])
		}
	}
}

// TestCopierBatchBytes copies one shard's collection of 1 KB documents
// with a 4 KiB batch cap: no batch holds more than the cap, and every
// document reaches the target.
func TestCopierBatchBytes(t *testing.T) {
	ctx := context.Background()
	src := testserver.Start(t).MustClient(t)
	var docs []any
	for i := range 50 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "pad", Value: string(bytes.Repeat([]byte("x"), 1000))}})
	}
	if _, err := src.Database("app").Collection("c").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	key, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}})
	lo, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.MinKey{}}})
	hi, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.MaxKey{}}})
	table, err := sourceshardcopy.NewTable(key, []sourceshardcopy.Chunk{{Min: lo, Max: hi, Shard: "s0"}})
	if err != nil {
		t.Fatal(err)
	}
	dst := testserver.Start(t).MustClient(t)
	largest := 0
	c := &sourceshardcopy.Copier{Shard: "s0", Source: src, NS: "app.c", Target: dst.Database("app").Collection("c"),
		BatchBytes: 4 << 10, Writer: &sink.Writer{MaxRetries: 3},
		Leaser: rangelease.New(dst.Database("mongoferry"), rangelease.Options{Task: "b", Owner: "w", TTL: time.Minute}),
		Hook:   func(_ sourceshardcopy.Range, n int) error { largest = max(largest, n); return nil }}
	ranges, err := sourceshardcopy.PlanShard(ctx, src, "s0", "app.c", 0, source.Splitter{RangeDocuments: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Copy(ctx, table, ranges); err != nil {
		t.Fatal(err)
	}
	if largest > 4 {
		t.Errorf("a batch of %d documents of 1 KB, want at most 4 under a 4 KiB cap", largest)
	}
	assertSame(ctx, t, src.Database("app").Collection("c"), dst.Database("app").Collection("c"))
}

// TestSavePass saves a pass on FerretDB (which refuses MinKey and MaxKey
// values, held in every table's bounds) and saves it again with another
// plan: the first saved stays, and loads as the same table and ranges.
func TestSavePass(t *testing.T) {
	ctx := context.Background()
	db := testserver.Start(t).MustClient(t).Database("mongoferry")
	key, _ := bson.Marshal(bson.D{{Key: "a.b", Value: 1}})
	b := func(v any) bson.Raw { r, _ := bson.Marshal(bson.D{{Key: "a.b", Value: v}}); return r }
	table, err := sourceshardcopy.NewTable(key, []sourceshardcopy.Chunk{
		{Min: b(bson.MinKey{}), Max: b(int64(10)), Shard: "s0", Version: bson.Timestamp{T: 1}},
		{Min: b(int64(10)), Max: b(bson.MaxKey{}), Shard: "s1", Version: bson.Timestamp{T: 2, I: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	filter, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: 5}}}})
	first := map[string][]sourceshardcopy.Range{"s0": {{ID: sourceshardcopy.RangeID("app.c", "s0", 3, 0), Filter: filter}}, "s1": nil}
	readAt := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	for i, plans := range []map[string][]sourceshardcopy.Range{first, {"s0": nil}} {
		got, err := sourceshardcopy.SavePass(ctx, db, "t", "app.c", sourceshardcopy.Pass{N: 3, Table: table, Ranges: plans,
			ReadAt: readAt.Add(time.Duration(i) * time.Hour), Positions: map[string]bson.Timestamp{"s0": {T: uint32(100 + i)}}})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sourceshardcopy.Changed(table, got.Table)); n != 0 || len(got.Table.Chunks()) != 2 {
			t.Fatalf("saved table: %d chunks changed, %d chunks", n, len(got.Table.Chunks()))
		}
		if r := got.Ranges["s0"]; len(r) != 1 || r[0].ID != "app.c/s0/p3/000000" || !bytes.Equal(r[0].Filter, filter) {
			t.Fatalf("saved ranges of s0: %v, want the first plan's", r)
		}
		if _, ok := got.Ranges["s1"]; !ok {
			t.Fatal("saved ranges lost shard s1, planned with no range")
		}
		if !got.ReadAt.Equal(readAt) || got.Positions["s0"] != (bson.Timestamp{T: 100}) {
			t.Fatalf("saved read time %v and positions %v, want the first save's", got.ReadAt, got.Positions)
		}
	}
	if list, err := sourceshardcopy.ListPasses(ctx, db, "t"); err != nil || len(list) != 1 || list[0] != (sourceshardcopy.SavedPass{NS: "app.c", N: 3}) {
		t.Fatalf("ListPasses: %v, %v; want app.c pass 3", list, err)
	}
	if _, err := sourceshardcopy.LoadPass(ctx, db, "t", "app.c", 4); !errors.Is(err, sourceshardcopy.ErrNoPass) {
		t.Fatalf("a pass never saved: %v, want ErrNoPass", err)
	}
}

// TestFrozenCopierWritesNothingStale freezes a copier after its first
// batch for longer than its lease's TTL: another worker takes the range
// over, writes newer versions of its documents (the next attempt, then
// replay moving on) and records it done. When the frozen copier wakes, it
// must write none of the older documents it had read ahead: it checks its
// lease before every write, gives the range up as lost, and the target
// keeps the newer versions.
func TestFrozenCopierWritesNothingStale(t *testing.T) {
	ctx := context.Background()
	src := testserver.Start(t).MustClient(t)
	dst := testserver.Start(t).MustClient(t)
	var docs []any
	for i := range 60 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "v", Value: 0}})
	}
	if _, err := src.Database("app").Collection("c").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	meta := dst.Database("mongoferry")
	const ttl = 300 * time.Millisecond
	ranges, err := sourceshardcopy.PlanShard(ctx, src, "s0", "app.c", 0, source.Splitter{RangeDocuments: 1000})
	if err != nil || len(ranges) != 1 {
		t.Fatalf("plan: %d ranges, %v; want 1", len(ranges), err)
	}
	ids := []string{ranges[0].ID}
	tgt := dst.Database("app").Collection("c")
	other := rangelease.New(meta, rangelease.Options{Task: "f", Owner: "other", TTL: ttl})
	frozen := false
	c := &sourceshardcopy.Copier{Shard: "s0", Source: src, NS: "app.c", Target: tgt, BatchDocs: 10,
		Writer: &sink.Writer{MaxRetries: 3}, RenewEvery: time.Hour,
		Leaser: rangelease.New(meta, rangelease.Options{Task: "f", Owner: "frozen", TTL: ttl}),
		Hook: func(sourceshardcopy.Range, int) error {
			if frozen {
				return nil
			}
			frozen = true
			// Frozen past the TTL: the other worker sees the lease
			// unrenewed, takes the range, writes v=1 everywhere and
			// records the range done.
			var lease *rangelease.Lease
			for lease == nil {
				var err error
				if lease, _, err = other.Claim(ctx, ids); err != nil {
					return err
				}
				time.Sleep(ttl / 2)
			}
			if _, err := src.Database("app").Collection("c").UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}}); err != nil {
				return err
			}
			if _, err := tgt.DeleteMany(ctx, bson.D{}); err != nil {
				return err
			}
			cur, err := src.Database("app").Collection("c").Find(ctx, bson.D{})
			if err != nil {
				return err
			}
			var newer []any
			if err := cur.All(ctx, &newer); err != nil {
				return err
			}
			if _, err := tgt.InsertMany(ctx, newer); err != nil {
				return err
			}
			return other.Finish(ctx, lease, int64(len(newer)), 0)
		}}
	if err := c.Copy(ctx, nil, ranges); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Lost != 1 || st.Ranges != 0 {
		t.Errorf("frozen copier: %+v, want the range lost and none recorded", st)
	}
	stale, err := tgt.CountDocuments(ctx, bson.D{{Key: "v", Value: 0}})
	if err != nil || stale != 0 {
		t.Errorf("%d documents of the older version on the target after the frozen copier woke (%v), want 0", stale, err)
	}
	assertSame(ctx, t, src.Database("app").Collection("c"), tgt)
}
