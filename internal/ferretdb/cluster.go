package ferretdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// Cluster is the closest stand-in for a sharded cluster that FerretDB
// (which has no sharding) allows. What stands in for what:
//
//   - each shard's replica set is one FerretDB server with its own real
//     oplog (local.oplog.rs, written by the server for every write);
//   - mongos is one more FerretDB server, the router server: it holds the
//     union of every shard's documents (what mongos returns, orphans
//     filtered, to the full copy and to verification) and config.shards
//     naming the shards (host "shardN/127.0.0.1:port");
//   - the cluster's routing table is Cluster's chunk table, written to the
//     router's config.collections and config.chunks (key {_id: 1}, each
//     chunk with its lastmod; clusterchunks.go): a document's shard key is
//     its integer _id, owned by the chunk holding it; Insert,
//     Update and Delete write to the router server, then to the owning
//     shard's server, uninterrupted once begun (so the router never shows
//     an older state than a shard's oplog: the engine re-reads the
//     documents of late oplog entries through mongos);
//   - the balancer is MoveChunk: it moves a chunk's documents to another
//     shard with their plain oplog entries removed (FerretDB cannot
//     mark writes fromMigrate), then injects the entries a real migration logs: the
//     recipient's start marker (a pending config.rangeDeletions task naming
//     the donor), its fromMigrate inserts, the donor's fromMigrate range
//     deletions, the commit (config.chunks at a new version, a
//     moveChunk.commit in config.changelog), then the recipient's end
//     marker (the task deleted). Writes wait while a chunk moves (MongoDB's critical
//     section), and a migration starts and ends on a second boundary, so
//     its injected entries sort after every earlier write and before
//     every later one.
//
// A task reaches it with source.uri = RouterURI, source.kind = sharded and
// source.shards = Overrides() (config.shards' host strings name replica
// sets that FerretDB servers are not).
type Cluster struct {
	// Router is the mongos stand-in.
	Router *Server
	// Shards are the shard servers; Names their config.shards names.
	Shards []*Server
	Names  []string

	mu     sync.Mutex // writes vs migrations
	router *mongo.Client
	// routerURI, when set, is the proxy the router is reached through
	// (RouteThrough).
	routerURI string
	clients   []*mongo.Client
	// tables are the namespaces' chunk tables (clusterchunks.go).
	tables map[string]*chunkTable
	// ChunkSize is the width of the default chunks: key k >= 0 belongs to
	// chunk k/ChunkSize, owned by shard (k/ChunkSize) mod len(Shards)
	// until a migration moves it, up to 64 chunks; the keys above and the
	// negative ones are one chunk each (clusterchunks.go). Set it before
	// the first write.
	ChunkSize  int64
	injected   uint32
	migrations int
	// KeepOrphans leaves a migration's documents on the donor, as
	// orphans, until RunRangeDeleter (or a migration of the range back
	// into that shard) removes them with fromMigrate deletes; set it
	// before the first move.
	KeepOrphans   bool
	orphans       []orphanRange
	defaultShards int
	stopNoops     context.CancelFunc
	noopsDone     chan struct{}
	// unlisted are the shards removed from config.shards: they log no
	// no-ops, as a decommissioned shard writes nothing the cluster reads.
	unlisted map[int]bool
	// oplogless are the shards whose oplog DropOplog removed: they get
	// no no-ops either (an insert would create a plain local.oplog.rs).
	oplogless map[int]bool
}

// NoopInterval is how often every shard logs a no-op, as a MongoDB
// replica set's primary does (its periodic noop writer, every 10 seconds;
// FerretDB never does). An idle shard's subtask advances on them, so the
// others are not held after a migration for longer than about this; and
// between two of them a subtask can be seen caught up.
const NoopInterval = 10 * time.Second

// noops injects {op: "n", o: {msg: "periodic noop"}} into every shard's
// oplog each NoopInterval until ctx ends.
func (c *Cluster) noops(ctx context.Context) {
	defer close(c.noopsDone)
	tick := time.NewTicker(NoopInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		sec := uint32(time.Now().Unix())
		for i := range c.clients {
			if c.unlisted[i] || c.oplogless[i] {
				continue
			}
			_ = c.inject(ctx, i, sec, []bson.D{{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}})
		}
		c.mu.Unlock()
	}
}

// StartClusterProcess starts a cluster of n shards; the caller must call
// Stop.
func StartClusterProcess(ctx context.Context, n int) (*Cluster, error) {
	c := &Cluster{tables: map[string]*chunkTable{}, ChunkSize: 1000, unlisted: map[int]bool{}, oplogless: map[int]bool{}}
	var err error
	if c.Router, err = StartProcess(ctx, Options{OplogBytes: -1}); err != nil {
		return nil, err
	}
	if c.router, err = c.Router.Client(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	for i := 0; i < n; i++ {
		if _, err := c.AddShard(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	c.defaultShards = n
	nctx, cancel := context.WithCancel(context.Background())
	c.stopNoops, c.noopsDone = cancel, make(chan struct{})
	go c.noops(nctx)
	return c, nil
}

// AddShard starts one more shard server and lists it in config.shards.
// It owns no chunk until one is moved to it.
func (c *Cluster) AddShard(ctx context.Context) (int, error) {
	i, err := c.PrepareShard(ctx)
	if err != nil {
		return 0, err
	}
	return i, c.ListShard(ctx, i)
}

// PrepareShard starts one more shard server without listing it in
// config.shards (Overrides names it already, as a task file may name a
// shard before it joins).
func (c *Cluster) PrepareShard(ctx context.Context) (int, error) {
	s, err := StartProcess(ctx, Options{})
	if err != nil {
		return 0, err
	}
	cl, err := s.Client(ctx)
	if err != nil {
		s.Stop()
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.Shards)
	c.Shards, c.Names, c.clients = append(c.Shards, s), append(c.Names, fmt.Sprintf("shard%d", i)), append(c.clients, cl)
	return i, c.initiate(ctx, i)
}

// ListShard lists shard i in config.shards: the shard joins the cluster.
func (c *Cluster) ListShard(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.router.Database("config").Collection("shards").InsertOne(ctx,
		bson.D{{Key: "_id", Value: c.Names[i]}, {Key: "host", Value: c.Names[i] + "/" + c.Shards[i].Addr}, {Key: "state", Value: int32(1)}})
	if err != nil {
		return fmt.Errorf("list %s in config.shards: %w", c.Names[i], err)
	}
	delete(c.unlisted, i)
	return nil
}

// RemoveShard drops shard i from config.shards (its server keeps running,
// as a removed shard's replica set does). It must own no chunk.
func (c *Cluster) RemoveShard(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.router.Database("config").Collection("shards").DeleteOne(ctx, bson.D{{Key: "_id", Value: c.Names[i]}})
	if err == nil {
		c.unlisted[i] = true
	}
	return err
}

// Stop stops every server.
func (c *Cluster) Stop() {
	if c.stopNoops != nil {
		c.stopNoops()
		<-c.noopsDone
	}
	for _, cl := range append([]*mongo.Client{c.router}, c.clients...) {
		if cl != nil {
			_ = cl.Disconnect(context.Background())
		}
	}
	for _, s := range append([]*Server{c.Router}, c.Shards...) {
		if s != nil {
			s.Stop()
		}
	}
}

// ResetOplogs empties every shard's oplog (before a task starts), as on a
// deployment whose oplog holds recent changes only: FerretDB scans a whole
// oplog on each read, so the initial load's entries would slow every
// reader down.
func (c *Cluster) ResetOplogs(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cl := range c.clients {
		if err := cl.Database("local").Collection("oplog.rs").Drop(ctx); err != nil {
			return fmt.Errorf("drop the oplog of %s: %w", c.Names[i], err)
		}
		if err := c.Shards[i].CreateOplog(ctx, DefaultOplogBytes); err != nil {
			return err
		}
		if err := c.initiate(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// initiate writes the entry a replica set's oplog begins with, mongod's
// {op: "n", o: {msg: "initiating set"}}, a second in the past: a MongoDB
// shard's oplog is never empty, and its oldest entry is older than any
// position a task takes on it. Without it, a start position taken on an
// empty oplog can lie below the first entry injected in the same second
// (the injected ones sort after FerretDB's own), and a task resuming from
// it would see its window lost.
func (c *Cluster) initiate(ctx context.Context, i int) error {
	sec := uint32(time.Now().Unix()) - 1
	return c.inject(ctx, i, sec, []bson.D{{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "initiating set"}}}}})
}

// DropOplog removes shard i's oplog for good, as on a shard that keeps
// none (a standalone server): the cluster writes it no more no-ops.
func (c *Cluster) DropOplog(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.oplogless[i] = true
	if err := c.clients[i].Database("local").Collection("oplog.rs").Drop(ctx); err != nil {
		return fmt.Errorf("drop the oplog of %s: %w", c.Names[i], err)
	}
	return nil
}

// RouterURI is the mongos stand-in's URI.
func (c *Cluster) RouterURI() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.routerURI != "" {
		return c.routerURI
	}
	return c.Router.URI
}

// RouteThrough sends the cluster's router traffic to uri, a proxy in
// front of the Router server (one that blocks user writes as mongos
// does, for example): Insert, Update and Delete write the router first,
// so a write the proxy refuses reaches no shard, as a write mongos
// refuses; RouterURI and Source name the proxy from then on.
func (c *Cluster) RouteThrough(ctx context.Context, uri string) error {
	cl, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	if err := cl.Ping(ctx, nil); err != nil {
		_ = cl.Disconnect(ctx)
		return fmt.Errorf("reach the router through %s: %w", uri, err)
	}
	c.mu.Lock()
	old := c.router
	c.router, c.routerURI = cl, uri
	c.mu.Unlock()
	return old.Disconnect(ctx)
}

// Source is a task's source endpoint for the cluster: the mongos stand-in,
// kind sharded, and the shards' addresses.
func (c *Cluster) Source() config.Endpoint {
	return config.Endpoint{URI: c.RouterURI(), Kind: config.KindSharded, Shards: c.Overrides()}
}

// Overrides are the source.shards[] entries that reach the shard servers.
func (c *Cluster) Overrides() []config.Shard {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]config.Shard, len(c.Shards))
	for i, s := range c.Shards {
		out[i] = config.Shard{Name: c.Names[i], URI: s.URI}
	}
	return out
}

// ShardClient returns a client of shard i's server.
func (c *Cluster) ShardClient(i int) *mongo.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clients[i]
}

// RouterClient returns a client of the mongos stand-in (reads only: write
// through Insert, Update and Delete).
func (c *Cluster) RouterClient() *mongo.Client { return c.router }

// Owner returns the shard owning key k of namespace ns.
func (c *Cluster) Owner(ns string, k int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owner(ns, k)
}

// initialShards is how many shards the default chunks spread over: the
// shards of the first start (shards added later own only moved chunks).
func (c *Cluster) initialShards() int { return max(c.defaultShards, 1) }

func split(ns string) (string, string) {
	db, coll, _ := strings.Cut(ns, ".")
	return db, coll
}

func (c *Cluster) coll(cl *mongo.Client, ns string) *mongo.Collection {
	db, coll := split(ns)
	return cl.Database(db).Collection(coll)
}

func keyOf(doc bson.D) (int64, error) {
	for _, e := range doc {
		if e.Key != "_id" {
			continue
		}
		switch v := e.Value.(type) {
		case int:
			return int64(v), nil
		case int32:
			return int64(v), nil
		case int64:
			return v, nil
		}
		return 0, fmt.Errorf("_id %v: the test router shards on integer _ids only", e.Value)
	}
	return 0, errors.New("document without _id")
}

// Insert writes documents to their owning shards and to the router.
// Like the other writes, once begun it is not interrupted by ctx: the
// router and the shard must not end up disagreeing.
func (c *Cluster) Insert(ctx context.Context, ns string, docs ...bson.D) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	byShard := map[int][]any{}
	all := make([]any, 0, len(docs))
	for _, d := range docs {
		k, err := keyOf(d)
		if err != nil {
			return err
		}
		o := c.owner(ns, k)
		byShard[o] = append(byShard[o], d)
		all = append(all, d)
	}
	if err := c.writeTable(ctx, ns); err != nil { // the first write of ns
		return err
	}
	if _, err := c.coll(c.router, ns).InsertMany(ctx, all); err != nil {
		return fmt.Errorf("insert into %s on the router: %w", ns, err)
	}
	for o, ds := range byShard {
		if _, err := c.coll(c.clients[o], ns).InsertMany(ctx, ds); err != nil {
			return fmt.Errorf("insert into %s on %s: %w", ns, c.Names[o], err)
		}
	}
	return nil
}

// Update sets fields of document k on its shard and on the router.
func (c *Cluster) Update(ctx context.Context, ns string, k int64, set bson.D) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	o := c.owner(ns, k)
	if err := c.writeTable(ctx, ns); err != nil {
		return err
	}
	u := bson.D{{Key: "$set", Value: set}}
	if _, err := c.coll(c.router, ns).UpdateOne(ctx, bson.D{{Key: "_id", Value: k}}, u); err != nil {
		return fmt.Errorf("update %s %d on the router: %w", ns, k, err)
	}
	if _, err := c.coll(c.clients[o], ns).UpdateOne(ctx, bson.D{{Key: "_id", Value: k}}, u); err != nil {
		return fmt.Errorf("update %s %d on %s: %w", ns, k, c.Names[o], err)
	}
	return nil
}

// Delete removes document k from its shard and from the router.
func (c *Cluster) Delete(ctx context.Context, ns string, k int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	o := c.owner(ns, k)
	if err := c.writeTable(ctx, ns); err != nil {
		return err
	}
	if _, err := c.coll(c.router, ns).DeleteOne(ctx, bson.D{{Key: "_id", Value: k}}); err != nil {
		return fmt.Errorf("delete %s %d on the router: %w", ns, k, err)
	}
	if _, err := c.coll(c.clients[o], ns).DeleteOne(ctx, bson.D{{Key: "_id", Value: k}}); err != nil {
		return fmt.Errorf("delete %s %d on %s: %w", ns, k, c.Names[o], err)
	}
	return nil
}

// MoveChunk moves the documents of ns with keys in [lo, hi) to shard to,
// as the balancer does, and returns how many moved. Writes wait meanwhile.
// Each chunk of the range owned by another shard moves as one migration:
// the recipient's start marker (its pending range deletion task in
// config.rangeDeletions), the documents in batches of at most
// migrationBatch, each within its own second (see unlogged), the commit
// (config.chunks, config.changelog), then the end marker (the task
// deleted). A chunk with no documents still migrates: markers and commit.
func (c *Cluster) MoveChunk(ctx context.Context, ns string, lo, hi int64, to int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx = context.WithoutCancel(ctx) // a half-done move would leave the shards disagreeing
	moved := 0
	defer nextSecond()
	migrations := c.plan(ns, lo, hi, to)
	if err := c.writeTable(ctx, ns); err != nil { // the splits at lo and hi
		return 0, err
	}
	for _, m := range migrations {
		n, err := c.migrate(ctx, ns, m)
		moved += n
		if err != nil {
			return moved, fmt.Errorf("move %s [%d,%d) from %s to %s: %w", ns, m.lo, m.hi, c.Names[m.from], c.Names[m.to], err)
		}
	}
	return moved, nil
}

// migrate runs one migration and returns how many documents moved.
func (c *Cluster) migrate(ctx context.Context, ns string, m migration) (int, error) {
	// A shard receives a range only once its own orphans of it are gone.
	if err := c.deleteOrphans(ctx, func(o orphanRange) bool { return o.ns == ns && o.shard == m.to && o.lo < m.hi && m.lo < o.hi }); err != nil {
		return 0, err
	}
	id, err := c.markStart(ctx, ns, m)
	if err != nil {
		return 0, err
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: m.lo}, {Key: "$lt", Value: m.hi}}}}
	cur, err := c.coll(c.clients[m.from], ns).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, err
	}
	var docs []bson.D
	if err := cur.All(ctx, &docs); err != nil {
		return 0, err
	}
	moved := 0
	for len(docs) > 0 {
		n := min(len(docs), migrationBatch)
		if err := c.moveBatch(ctx, ns, m.from, m.to, docs[:n]); err != nil {
			return moved, err
		}
		moved += n
		docs = docs[n:]
	}
	if err := c.commit(ctx, ns, m, moved); err != nil {
		return moved, err
	}
	if c.KeepOrphans {
		c.orphans = append(c.orphans, orphanRange{ns: ns, shard: m.from, lo: m.lo, hi: m.hi})
	}
	return moved, c.markEnd(ctx, m, id)
}

// migrationBatch bounds the documents one migration step moves, so that a
// step's writes and injected entries fit in about a second.
const migrationBatch = 25

// moveBatch moves docs from one shard to another in one second: the data
// moves unlogged, then the oplogs get what a real migration logs, the
// recipient's fromMigrate inserts before the donor's fromMigrate deletes.
func (c *Cluster) moveBatch(ctx context.Context, ns string, from, to int, docs []bson.D) error {
	sec := nextSecond()
	ids := make(bson.A, len(docs))
	anys := make([]any, len(docs))
	for i, d := range docs {
		ids[i], anys[i] = d[0].Value, d
	}
	touched := []int{to, from}
	if c.KeepOrphans {
		touched = []int{to} // the donor keeps its copies: orphans
	}
	err := c.unlogged(ctx, ns, ids, sec, touched, func() error {
		if _, err := c.coll(c.clients[to], ns).InsertMany(ctx, anys); err != nil {
			return err
		}
		if c.KeepOrphans {
			return nil
		}
		_, err := c.coll(c.clients[from], ns).DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		return err
	})
	if err != nil {
		return err
	}
	// The plain entries lived from sec until now: a reader may have been
	// handed them if that took too long.
	if late := time.Since(time.Unix(int64(sec), 0)); late > 2500*time.Millisecond {
		return fmt.Errorf("a migration step of %d documents was unlogged only %s after its second began: the stand-in needs it under 2.5s; move smaller chunks or load the machine less", len(docs), late)
	}
	// The migration's entries take the second they are written in: no
	// write ran since the step began (c.mu), so a later second orders them
	// as well, and a reader cannot have passed it yet.
	sec = max(sec, uint32(time.Now().Unix()))
	ins := make([]bson.D, len(docs))
	dels := make([]bson.D, len(docs))
	for i, d := range docs {
		ins[i] = bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "o", Value: d}, {Key: "fromMigrate", Value: true}}
		dels[i] = bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "o", Value: bson.D{d[0]}}, {Key: "fromMigrate", Value: true}}
	}
	if err := c.inject(ctx, to, sec, ins); err != nil {
		return err
	}
	if !c.KeepOrphans {
		if err := c.inject(ctx, from, sec, dels); err != nil {
			return err
		}
	}
	// Removing the plain entries logged deletes of local.oplog.rs
	// documents, possibly a second or two after sec; readers never see
	// entries of local, so a shard whose last entry is one of them would
	// look forever unread. A no-op after them (MongoDB writes one every
	// 10 seconds on an idle shard) is the newest entry instead.
	noop := []bson.D{{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}}
	now := uint32(time.Now().Unix())
	for _, i := range []int{to, from} {
		if err := c.inject(ctx, i, now, noop); err != nil {
			return err
		}
	}
	// The engine's tailer on FerretDB hands out an entry of second sec
	// only once the clock reads sec+3 (entries younger than 2 whole
	// seconds are held back): injecting that took longer may have let a
	// reader pass the second before its fromMigrate entries were there.
	// Fail rather than mislead.
	if late := time.Since(time.Unix(int64(sec), 0)); late > 2500*time.Millisecond {
		return fmt.Errorf("a migration step of %d documents was injected only %s after its second began: the stand-in needs it under 2.5s; move smaller chunks or load the machine less", len(docs), late)
	}
	return nil
}

// unlogged runs fn, then deletes from the given shards' oplogs the entries
// fn's writes made (FerretDB logs every write, cannot mark one
// fromMigrate, and refuses to rename or restore its oplog). The entries
// live for milliseconds within the migration's second; the engine's
// tailer on FerretDB hands out no entry younger than 2 seconds (see
// source.Tailer.Settle), so it never sees them.
func (c *Cluster) unlogged(ctx context.Context, ns string, ids bson.A, sec uint32, shards []int, fn func() error) error {
	if err := fn(); err != nil {
		return err
	}
	filter := bson.D{
		{Key: "ts", Value: bson.D{{Key: "$gte", Value: bson.Timestamp{T: sec}}}},
		{Key: "ns", Value: ns},
		{Key: "fromMigrate", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "o._id", Value: bson.D{{Key: "$in", Value: ids}}},
	}
	for _, i := range shards {
		res, err := c.clients[i].Database("local").Collection("oplog.rs").DeleteMany(ctx, filter)
		if err != nil {
			return fmt.Errorf("unlog the moved documents on %s: %w", c.Names[i], err)
		}
		if res.DeletedCount != int64(len(ids)) {
			return fmt.Errorf("unlog the moved documents on %s: %d oplog entries found, want %d", c.Names[i], res.DeletedCount, len(ids))
		}
	}
	return nil
}

// inject writes entries into shard i's oplog at second sec, in order.
func (c *Cluster) inject(ctx context.Context, i int, sec uint32, entries []bson.D) error {
	docs := make([]any, len(entries))
	for j, e := range entries {
		c.injected++
		ts := bson.Timestamp{T: sec, I: 1<<30 + c.injected}
		docs[j] = append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}}, e...)
	}
	if _, err := c.clients[i].Database("local").Collection("oplog.rs").InsertMany(ctx, docs); err != nil {
		return fmt.Errorf("inject into the oplog of %s: %w", c.Names[i], err)
	}
	return nil
}

// nextSecond sleeps until the wall clock enters a new second and returns
// it.
func nextSecond() uint32 {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now) + 5*time.Millisecond)
	return uint32(time.Now().Unix())
}
