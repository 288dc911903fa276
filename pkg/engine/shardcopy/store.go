package shardcopy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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

// SavePass saves pass of ns: its table and each shard's ranges. Saving a
// pass saved already keeps the first (a leader that restarted planned it
// before): it returns the saved one's table and ranges, which workers
// use.
func SavePass(ctx context.Context, db *mongo.Database, task, ns string, pass int, table *Table, ranges map[string][]Range) (*Table, map[string][]Range, error) {
	d := passDoc{ID: passID(task, ns, pass), Task: task, NS: ns, Pass: pass, Key: table.fields}
	for _, c := range table.chunks {
		d.Chunks = append(d.Chunks, chunkDoc{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version})
	}
	for s, rs := range ranges {
		sr := shardRanges{Shard: s}
		for _, r := range rs {
			sr.Ranges = append(sr.Ranges, rangeDoc{ID: r.ID, Filter: r.Filter})
		}
		d.Ranges = append(d.Ranges, sr)
	}
	if _, err := db.Collection(PassesCollection).InsertOne(ctx, d); err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, nil, fmt.Errorf("save pass %d of %s: %w", pass, ns, err)
	}
	return LoadPass(ctx, db, task, ns, pass)
}

// LoadPass returns the saved table and ranges of pass of ns, or
// ErrNoPass.
func LoadPass(ctx context.Context, db *mongo.Database, task, ns string, pass int) (*Table, map[string][]Range, error) {
	var d passDoc
	err := db.Collection(PassesCollection).FindOne(ctx, bson.D{{Key: "_id", Value: passID(task, ns, pass)}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil, fmt.Errorf("pass %d of %s: %w", pass, ns, ErrNoPass)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load pass %d of %s: %w", pass, ns, err)
	}
	key := bson.D{}
	for _, f := range d.Key {
		key = append(key, bson.E{Key: f, Value: int32(1)})
	}
	keyRaw, err := bson.Marshal(key)
	if err != nil {
		return nil, nil, err
	}
	chunks := make([]Chunk, len(d.Chunks))
	for i, c := range d.Chunks {
		chunks[i] = Chunk{Min: c.Min, Max: c.Max, Shard: c.Shard, Version: c.Version}
	}
	table, err := NewTable(keyRaw, chunks)
	if err != nil {
		return nil, nil, fmt.Errorf("load pass %d of %s (fields %s): %w", pass, ns, strings.Join(d.Key, ", "), err)
	}
	ranges := map[string][]Range{}
	for _, sr := range d.Ranges {
		for _, r := range sr.Ranges {
			ranges[sr.Shard] = append(ranges[sr.Shard], Range{ID: r.ID, Filter: r.Filter})
		}
	}
	return table, ranges, nil
}
