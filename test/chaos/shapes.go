package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// shapesColl holds the documents written only through multi-operation
// oplog entries (Shapes).
const shapesColl = "shapes"

// shapeKinds are the multi-operation entries Shapes writes, the shapes a
// replica set logs that FerretDB itself never does.
var shapeKinds = []string{"applyOps", "transaction", "partialTxn chain", "prepared, committed", "prepared, aborted"}

// injectedI is the ts increment of the entries Shapes writes: above any a
// FerretDB server gives (its counter starts at 1 for each process), so an
// injected entry sorts after every real one of its second.
var injectedI atomic.Uint32

func init() { injectedI.Store(1 << 31) }

// Shapes writes the shapes collection of one epoch's database through
// entries of every multi-operation shape, so that the faults (the
// worker's kills above all) land while replay applies them: a user's
// applyOps, a one-entry transaction, a partialTxn chain, a prepared
// transaction committed and one aborted. FerretDB logs plain entries
// only, and refuses stored field names with '$' (DESIGN §7), so each step
// writes the documents on the source with plain writes, removes the
// plain entries they logged from local.oplog.rs, and writes the step's
// entries in their place with ts values above the server's (the
// documents are replaced whole, as a replacement update logs them). The
// source's documents are then only reachable through those entries: one
// that replay loses or applies twice shows in the comparison. An aborted
// transaction changes nothing on the source, and must change nothing on
// the target.
type Shapes struct {
	db    *mongo.Database
	local *mongo.Collection

	mu        sync.Mutex
	live      map[int32]bool
	uncertain map[int32]bool
	steps     map[string]int64
	txn       int64
}

func newShapes(db *mongo.Database) *Shapes {
	return &Shapes{db: db, local: db.Client().Database("local").Collection("oplog.rs"),
		live: map[int32]bool{}, uncertain: map[int32]bool{}, steps: map[string]int64{}}
}

// Steps returns how many steps of each shape were written.
func (s *Shapes) Steps() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.steps))
	for k, v := range s.steps {
		out[k] = v
	}
	return out
}

// step writes one random shape of two or three operations.
func (s *Shapes) step(ctx context.Context, rng *rand.Rand) {
	kind := shapeKinds[rng.IntN(len(shapeKinds))]
	ns := s.db.Name() + "." + shapesColl
	type write struct {
		id  int32
		doc bson.D // nil: a delete
	}
	var writes []write
	touched := map[int32]bool{}
	s.mu.Lock()
	for range 2 + rng.IntN(2) {
		id := int32(rng.IntN(20))
		if touched[id] {
			continue
		}
		touched[id] = true
		w := write{id: id}
		if !s.live[id] || rng.IntN(3) > 0 {
			w.doc = bson.D{{Key: "_id", Value: id}, {Key: "shape", Value: kind}, {Key: "v", Value: int32(rng.IntN(1 << 20))}}
		}
		writes = append(writes, w)
	}
	s.txn++
	txn := s.txn
	s.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	started := time.Now().UTC().Truncate(time.Millisecond)
	coll := s.db.Collection(shapesColl)
	ops := bson.A{}
	failed := func() {
		s.mu.Lock()
		for id := range touched {
			s.uncertain[id] = true
		}
		s.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range writes {
		key := bson.D{{Key: "_id", Value: w.id}}
		var op bson.D
		switch s.mu.Lock(); {
		case w.doc == nil:
			s.mu.Unlock()
			op = bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "o", Value: key}}
		case s.live[w.id]:
			s.mu.Unlock()
			op = bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: ns}, {Key: "o", Value: w.doc}, {Key: "o2", Value: key}}
		default:
			s.mu.Unlock()
			op = bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "o", Value: w.doc}}
		}
		ops = append(ops, op)
		if kind == "prepared, aborted" {
			continue
		}
		var err error
		if w.doc == nil {
			_, err = coll.DeleteOne(octx, key)
		} else {
			_, err = coll.ReplaceOne(octx, key, w.doc, options.Replace().SetUpsert(true))
		}
		if err != nil {
			failed()
			return
		}
	}
	// The plain entries those writes logged go; the step's own entries
	// take their place.
	if _, err := s.local.DeleteMany(octx, bson.D{{Key: "ns", Value: ns}, {Key: "wall", Value: bson.D{{Key: "$gte", Value: started}}}}); err != nil {
		failed()
		return
	}
	now := uint32(time.Now().Unix())
	next := func() bson.Timestamp { return bson.Timestamp{T: now, I: injectedI.Add(1)} }
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte(fmt.Sprintf("chaos-shapes-%04d", txn%10000))}}}
	txnFields := func(prev bson.Timestamp) bson.D {
		return bson.D{{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: txn}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prev}, {Key: "t", Value: int64(1)}}}}
	}
	entry := func(ts bson.Timestamp, o bson.D, extra bson.D) bson.D {
		return append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: o}, {Key: "wall", Value: time.Now().UTC()}}, extra...)
	}
	var entries []any
	switch kind {
	case "applyOps":
		entries = append(entries, entry(next(), bson.D{{Key: "applyOps", Value: ops}}, nil))
	case "transaction":
		entries = append(entries, entry(next(), bson.D{{Key: "applyOps", Value: ops}}, txnFields(bson.Timestamp{})))
	case "partialTxn chain":
		first := next()
		entries = append(entries,
			entry(first, bson.D{{Key: "applyOps", Value: ops[:1]}, {Key: "partialTxn", Value: true}}, txnFields(bson.Timestamp{})),
			entry(next(), bson.D{{Key: "applyOps", Value: ops[1:]}, {Key: "count", Value: int64(len(ops))}}, txnFields(first)))
	default:
		prep := next()
		entries = append(entries, entry(prep, bson.D{{Key: "applyOps", Value: ops}, {Key: "prepare", Value: true}}, txnFields(bson.Timestamp{})))
		end := next()
		if kind == "prepared, aborted" {
			entries = append(entries, entry(end, bson.D{{Key: "abortTransaction", Value: int32(1)}}, txnFields(prep)))
		} else {
			entries = append(entries, entry(end, bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: end}}, txnFields(prep)))
		}
	}
	if _, err := s.local.InsertMany(octx, entries); err != nil {
		failed()
		return
	}
	s.mu.Lock()
	s.steps[kind]++
	if kind != "prepared, aborted" {
		for _, w := range writes {
			s.live[w.id] = w.doc != nil
		}
	}
	s.mu.Unlock()
}

// repair writes again, with plain writes whose entries stay in the oplog,
// every shapes document a failed step may have left between the source
// and its entries, as Load.Repair does for the other collections.
func (s *Shapes) repair(ctx context.Context) (int, error) {
	s.mu.Lock()
	ids := make([]int32, 0, len(s.uncertain))
	for id := range s.uncertain {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	coll := s.db.Collection(shapesColl)
	for _, id := range ids {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		key := bson.D{{Key: "_id", Value: id}}
		res, err := coll.UpdateOne(octx, key, bson.D{{Key: "$inc", Value: bson.D{{Key: "repaired", Value: int64(1)}}}})
		live := err == nil && res.MatchedCount > 0
		if err == nil && !live {
			if _, err = coll.InsertOne(octx, key); err == nil {
				_, err = coll.DeleteOne(octx, key)
			}
		}
		cancel()
		if err != nil {
			return 0, fmt.Errorf("repair shapes %d: %w", id, err)
		}
		s.mu.Lock()
		delete(s.uncertain, id)
		s.live[id] = live
		s.mu.Unlock()
	}
	return len(ids), nil
}
