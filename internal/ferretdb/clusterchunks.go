package ferretdb

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The cluster's routing table, as a config server keeps it: each
// namespace the cluster has written gets a config.collections entry
// (key {_id: 1}) and config.chunks covering MinKey to MaxKey, each chunk
// with its lastmod. A migration's commit gives the moved chunk a new
// major version, a split new minor versions to both halves, as MongoDB
// does; each commit is also logged in config.changelog (moveChunk.commit).
//
// What differs from MongoDB: the outer bounds (MinKeyBound, MaxKeyBound
// below), and the chunk documents of each change are
// written as a new set under a new collection uuid, and config.collections
// then names it (ReadLayout reads chunks by uuid), so that a reader never
// sees a half-written table (a config server commits a migration in one
// transaction; FerretDB has none). The previous set is kept one change
// longer for readers between their two reads.

// initialBlocks is how many default chunks (of ChunkSize keys each) a
// namespace's table starts with above key 0; the keys beyond them are
// the last chunk's, on its default shard until a migration moves it.
const initialBlocks = 64

// minKeyInt and maxKeyInt stand for MinKey and MaxKey in a span.
const (
	minKeyInt = math.MinInt64
	maxKeyInt = math.MaxInt64
)

// span is one chunk of a namespace: keys [min, max) on shard.
type span struct {
	min, max int64
	shard    int
	version  bson.Timestamp
}

// chunkTable is one namespace's chunks, sorted and covering every key.
type chunkTable struct {
	spans []span
	// major and minor are the collection version; gen counts the chunk
	// sets written.
	major, minor uint32
	gen          int
	// dirty is set when the table changed since config was written.
	dirty bool
}

// defaultOwner is the shard owning key block b before any migration.
func (c *Cluster) defaultOwner(b int64) int { return int(b % int64(c.initialShards())) }

// table returns ns's chunk table, created on first use: [MinKey, 0) on
// the first shard, then initialBlocks default chunks, then the rest.
func (c *Cluster) table(ns string) *chunkTable {
	if t, ok := c.tables[ns]; ok {
		return t
	}
	t := &chunkTable{major: 1, dirty: true}
	t.spans = append(t.spans, span{min: minKeyInt, max: 0, shard: 0, version: bson.Timestamp{T: 1}})
	for b := int64(0); b < initialBlocks; b++ {
		t.spans = append(t.spans, span{min: b * c.ChunkSize, max: (b + 1) * c.ChunkSize, shard: c.defaultOwner(b), version: bson.Timestamp{T: 1}})
	}
	t.spans = append(t.spans, span{min: initialBlocks * c.ChunkSize, max: maxKeyInt, shard: c.defaultOwner(initialBlocks), version: bson.Timestamp{T: 1}})
	c.tables[ns] = t
	return t
}

// find returns the index of the span holding key k.
func (t *chunkTable) find(k int64) int {
	return sort.Search(len(t.spans), func(i int) bool { return t.spans[i].max > k })
}

// splitAt splits span i at key at (inside it), both halves at new minor
// versions.
func (t *chunkTable) splitAt(i int, at int64) {
	s := t.spans[i]
	if at <= s.min || at >= s.max {
		return
	}
	t.minor++
	lo := span{min: s.min, max: at, shard: s.shard, version: bson.Timestamp{T: t.major, I: t.minor}}
	t.minor++
	hi := span{min: at, max: s.max, shard: s.shard, version: bson.Timestamp{T: t.major, I: t.minor}}
	t.spans = append(t.spans[:i], append([]span{lo, hi}, t.spans[i+1:]...)...)
	t.dirty = true
}

// owner returns the shard owning key k of ns.
func (c *Cluster) owner(ns string, k int64) int {
	t := c.table(ns)
	return t.spans[t.find(k)].shard
}

// migration is one chunk's move: the keys [lo, hi) from donor to to.
type migration struct {
	lo, hi   int64
	from, to int
}

// plan splits ns's chunks at lo and hi and returns the migrations that
// move [lo, hi) to shard to, one per chunk owned elsewhere.
func (c *Cluster) plan(ns string, lo, hi int64, to int) []migration {
	t := c.table(ns)
	t.splitAt(t.find(lo), lo)
	if hi < maxKeyInt {
		t.splitAt(t.find(hi), hi)
	}
	var out []migration
	for i := t.find(lo); i < len(t.spans) && t.spans[i].min < hi; i++ {
		if s := t.spans[i]; s.shard != to {
			out = append(out, migration{lo: s.min, hi: s.max, from: s.shard, to: to})
		}
	}
	return out
}

// commit gives the chunk [lo, hi) of ns to shard to at a new major
// version, writes the table and logs moveChunk.commit.
func (c *Cluster) commit(ctx context.Context, ns string, m migration, docs int) error {
	t := c.table(ns)
	i := t.find(m.lo)
	t.major++
	t.minor = 0
	t.spans[i].shard, t.spans[i].version = m.to, bson.Timestamp{T: t.major}
	t.dirty = true
	if err := c.writeTable(ctx, ns); err != nil {
		return err
	}
	_, err := c.router.Database("config").Collection("changelog").InsertOne(ctx, bson.D{
		{Key: "_id", Value: fmt.Sprintf("%s-%s-%d", c.Router.Addr, ns, t.gen)},
		{Key: "server", Value: c.Router.Addr}, {Key: "shard", Value: c.Names[m.from]},
		{Key: "time", Value: time.Now().UTC()}, {Key: "what", Value: "moveChunk.commit"}, {Key: "ns", Value: ns},
		{Key: "details", Value: bson.D{{Key: "min", Value: keyBound(m.lo)}, {Key: "max", Value: keyBound(m.hi)},
			{Key: "from", Value: c.Names[m.from]}, {Key: "to", Value: c.Names[m.to]}, {Key: "counts", Value: bson.D{{Key: "cloned", Value: int64(docs)}}}}},
	})
	if err != nil {
		return fmt.Errorf("log the commit of %s [%d,%d) in config.changelog: %w", ns, m.lo, m.hi, err)
	}
	return nil
}

// MinKeyBound and MaxKeyBound stand for MinKey and MaxKey in the bounds
// the stand-in writes to config.chunks and config.rangeDeletions:
// FerretDB refuses MinKey and MaxKey values (it drops the connection), so
// a reader of the stand-in's table maps {_id: MinKeyBound} to
// {_id: MinKey} and {_id: MaxKeyBound} to {_id: MaxKey} before use.
const (
	MinKeyBound = "stand-in MinKey"
	MaxKeyBound = "stand-in MaxKey"
)

// keyBound is the {_id: v} bound of key k (MinKeyBound and MaxKeyBound at
// the ends).
func keyBound(k int64) bson.D {
	switch k {
	case minKeyInt:
		return bson.D{{Key: "_id", Value: MinKeyBound}}
	case maxKeyInt:
		return bson.D{{Key: "_id", Value: MaxKeyBound}}
	}
	return bson.D{{Key: "_id", Value: k}}
}

// genUUID is the uuid naming chunk set gen of ns.
func genUUID(ns string, gen int) bson.Binary {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", ns, gen))
	return bson.Binary{Subtype: 4, Data: sum[:16]}
}

// writeTable writes ns's table to the router's config.chunks and
// config.collections when it changed (see the top of this file).
func (c *Cluster) writeTable(ctx context.Context, ns string) error {
	t := c.table(ns)
	if !t.dirty {
		return nil
	}
	t.gen++
	uuid := genUUID(ns, t.gen)
	docs := make([]any, len(t.spans))
	for i, s := range t.spans {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s-g%d-%d", ns, t.gen, i)}, {Key: "uuid", Value: uuid},
			{Key: "min", Value: keyBound(s.min)}, {Key: "max", Value: keyBound(s.max)},
			{Key: "shard", Value: c.Names[s.shard]}, {Key: "lastmod", Value: s.version}}
	}
	cfg := c.router.Database("config")
	if _, err := cfg.Collection("chunks").InsertMany(ctx, docs); err != nil {
		return fmt.Errorf("write config.chunks of %s: %w", ns, err)
	}
	coll := bson.D{{Key: "_id", Value: ns}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "unique", Value: false},
		{Key: "uuid", Value: uuid}, {Key: "lastmodEpoch", Value: genUUID(ns, 0)}, {Key: "lastmod", Value: time.Now().UTC()}}
	if _, err := cfg.Collection("collections").ReplaceOne(ctx, bson.D{{Key: "_id", Value: ns}}, coll, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("write config.collections of %s: %w", ns, err)
	}
	if t.gen > 2 {
		if _, err := cfg.Collection("chunks").DeleteMany(ctx, bson.D{{Key: "uuid", Value: genUUID(ns, t.gen-2)}}); err != nil {
			return fmt.Errorf("drop old config.chunks of %s: %w", ns, err)
		}
	}
	t.dirty = false
	return nil
}

// rangeTask is the recipient's pending range deletion task of migration
// m of ns, the start marker a migration logs (config.rangeDeletions).
func (c *Cluster) rangeTask(ns string, m migration, id bson.Binary) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "nss", Value: ns}, {Key: "collectionUuid", Value: genUUID(ns, 0)},
		{Key: "donorShardId", Value: c.Names[m.from]},
		{Key: "range", Value: bson.D{{Key: "min", Value: keyBound(m.lo)}, {Key: "max", Value: keyBound(m.hi)}}},
		{Key: "whenToClean", Value: "now"}, {Key: "pending", Value: true}}
}

// markStart logs the recipient's start marker of migration m (the insert
// of its pending range deletion task) in its own second and returns the
// task's _id.
func (c *Cluster) markStart(ctx context.Context, ns string, m migration) (bson.Binary, error) {
	c.migrations++
	id := genUUID(fmt.Sprintf("migration %s %d", ns, c.migrations), 0)
	sec := nextSecond()
	entry := bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "config.rangeDeletions"}, {Key: "o", Value: c.rangeTask(ns, m, id)}}
	return id, c.inject(ctx, m.to, sec, []bson.D{entry})
}

// markEnd logs the recipient's end marker (the delete of its task, after
// the commit), in the second it is written in: no write ran since the
// migration began (c.mu), and MoveChunk waits for the next second after.
func (c *Cluster) markEnd(ctx context.Context, m migration, id bson.Binary) error {
	entry := bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: "config.rangeDeletions"}, {Key: "o", Value: bson.D{{Key: "_id", Value: id}}}}
	return c.inject(ctx, m.to, uint32(time.Now().Unix()), []bson.D{entry})
}

// RealBound returns a bound as MongoDB writes it: {_id: MinKey} for
// {_id: MinKeyBound}, {_id: MaxKey} for {_id: MaxKeyBound}, any other b
// as it is.
func RealBound(b bson.Raw) bson.Raw {
	s, ok := b.Lookup("_id").StringValueOK()
	if !ok || (s != MinKeyBound && s != MaxKeyBound) {
		return b
	}
	v := any(bson.MinKey{})
	if s == MaxKeyBound {
		v = bson.MaxKey{}
	}
	out, _ := bson.Marshal(bson.D{{Key: "_id", Value: v}})
	return out
}
