package sourceshardcopy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// PassesCollection holds each pass's table and range plans, in the
// task's checkpoint database on the target, so that every worker of a
// pass filters with the same table and copies the same ranges
// (checkpoint.Store.Drop clears it with the task).
const PassesCollection = checkpoint.ShardCopyCollection

// ErrNoPass means a pass is not saved yet: the leader has not planned it.
var ErrNoPass = errors.New("per-shard copy pass not saved yet")

// passDoc is a saved pass. Bounds and filters are kept as the bytes of
// their documents: a bound may hold MinKey or MaxKey, which some servers
// (FerretDB) refuse to store.
type passDoc struct {
	ID     string        `bson:"_id"`
	Task   string        `bson:"task"`
	NS     string        `bson:"ns"`
	Pass   int           `bson:"pass"`
	Key    []string      `bson:"key"`
	Chunks []chunkDoc    `bson:"chunks"`
	Ranges []shardRanges `bson:"ranges"`
	// ReadAt and Positions are when the table was read and the shards'
	// oplog positions just before.
	ReadAt    time.Time       `bson:"readAt"`
	Positions []shardPosition `bson:"positions"`
}

type shardPosition struct {
	Shard string
	TS    bson.Timestamp
}

// shardRanges are one shard's ranges (a list, not a map: a shard's name
// is not always a valid field name).
type shardRanges struct {
	Shard  string
	Ranges []rangeDoc
}

type chunkDoc struct {
	Min, Max []byte
	Shard    string
	Version  bson.Timestamp
}

type rangeDoc struct {
	ID     string
	Filter []byte
}

func passID(task, ns string, pass int) string { return fmt.Sprintf("%s/%s/%d", task, ns, pass) }

// SavePass saves pass p of ns. Saving a pass saved already keeps the
// first (a leader that restarted planned it before): it returns the
// saved one, which workers use.
func SavePass(ctx context.Context, db *mongo.Database, task, ns string, p Pass) (Pass, error) {
	d := passDoc{ID: passID(task, ns, p.N), Task: task, NS: ns, Pass: p.N, Key: p.Table.fields, ReadAt: p.ReadAt.UTC()}
	for _, c := range p.Table.chunks {
		d.Chunks = append(d.Chunks, chunkDoc{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version})
	}
	for _, s := range slices.Sorted(maps.Keys(p.Ranges)) {
		sr := shardRanges{Shard: s}
		for _, r := range p.Ranges[s] {
			sr.Ranges = append(sr.Ranges, rangeDoc{ID: r.ID, Filter: r.Filter})
		}
		d.Ranges = append(d.Ranges, sr)
	}
	for _, s := range slices.Sorted(maps.Keys(p.Positions)) {
		d.Positions = append(d.Positions, shardPosition{Shard: s, TS: p.Positions[s]})
	}
	if _, err := db.Collection(PassesCollection).InsertOne(ctx, d); err != nil && !mongo.IsDuplicateKeyError(err) {
		return Pass{}, fmt.Errorf("save pass %d of %s: %w", p.N, ns, err)
	}
	return LoadPass(ctx, db, task, ns, p.N)
}

// LoadPass returns the saved pass n of ns, or ErrNoPass.
func LoadPass(ctx context.Context, db *mongo.Database, task, ns string, n int) (Pass, error) {
	var d passDoc
	err := db.Collection(PassesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: passID(task, ns, n)}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Pass{}, fmt.Errorf("pass %d of %s: %w", n, ns, ErrNoPass)
	}
	if err != nil {
		return Pass{}, fmt.Errorf("load pass %d of %s: %w", n, ns, err)
	}
	return d.pass()
}

// pass decodes a saved pass.
func (d passDoc) pass() (Pass, error) {
	key := bson.D{}
	for _, f := range d.Key {
		key = append(key, bson.E{Key: f, Value: int32(1)})
	}
	keyRaw, err := bson.Marshal(key)
	if err != nil {
		return Pass{}, err
	}
	chunks := make([]Chunk, len(d.Chunks))
	for i, c := range d.Chunks {
		chunks[i] = Chunk{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version}
	}
	table, err := NewTable(keyRaw, chunks)
	if err != nil {
		return Pass{}, fmt.Errorf("load pass %d of %s (fields %s): %w", d.Pass, d.NS, strings.Join(d.Key, ", "), err)
	}
	out := Pass{N: d.Pass, Table: table, ReadAt: d.ReadAt, Ranges: map[string][]Range{}, Positions: map[string]bson.Timestamp{}}
	for _, sr := range d.Ranges {
		out.Ranges[sr.Shard] = []Range{}
		for _, r := range sr.Ranges {
			out.Ranges[sr.Shard] = append(out.Ranges[sr.Shard], Range{ID: r.ID, Filter: r.Filter})
		}
	}
	for _, sp := range d.Positions {
		out.Positions[sp.Shard] = sp.TS
	}
	return out, nil
}

// SavedPass names a saved pass: its collection and number.
type SavedPass struct {
	NS string
	N  int
}

// ListPasses returns the task's saved passes in the order they were
// planned: by collection, then number.
func ListPasses(ctx context.Context, db *mongo.Database, task string) ([]SavedPass, error) {
	cur, err := db.Collection(PassesCollection).Find(ctx, bson.D{{Key: "task", Value: task}},
		options.Find().SetProjection(bson.D{{Key: "ns", Value: 1}, {Key: "pass", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("list the per-shard copy passes: %w", err)
	}
	var docs []passDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("list the per-shard copy passes: %w", err)
	}
	out := make([]SavedPass, len(docs))
	for i, d := range docs {
		out[i] = SavedPass{NS: d.NS, N: d.Pass}
	}
	slices.SortFunc(out, func(a, b SavedPass) int {
		if c := strings.Compare(a.NS, b.NS); c != 0 {
			return c
		}
		return a.N - b.N
	})
	return out, nil
}
