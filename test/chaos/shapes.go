package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The shapes writer's collections in each epoch's database, and the
// document outside every task whose $currentDate hands out its ts values.
const (
	shapesColl = "shapes"
	ddlColl    = "shapesddl"
	clockDB    = "chaosclock"
)

// The shapes Shapes writes: entries a replica set logs and FerretDB never
// does. Each names one step; the DDL step alternates between its two.
const (
	shapeApplyOps    = "applyOps"
	shapeReplacement = "replacement"
	shapeTxn         = "transaction"
	shapeTxnDDL      = "transaction: create, createIndexes, inserts"
	shapeDrop        = "drop"
	shapeChain       = "partialTxn chain"
	shapeBatched     = "batched writes (multiOpType 1)"
	shapeCommitted   = "prepared, committed"
	shapeAborted     = "prepared, aborted"
)

// ShapeKinds lists the shapes in the order the report prints them.
var ShapeKinds = []string{shapeApplyOps, shapeReplacement, shapeTxn, shapeTxnDDL, shapeDrop, shapeChain, shapeBatched, shapeCommitted, shapeAborted}

// stepKinds are drawn for each step; "ddl" is shapeTxnDDL or shapeDrop.
var stepKinds = []string{shapeApplyOps, shapeReplacement, shapeTxn, "ddl", shapeChain, shapeBatched, shapeCommitted, shapeAborted}

// visibleWithin is how long after the server handed out a step's first ts
// its entries must be in the oplog. The worker's tailer hands out no entry
// of a second until that second is its Settle (2 s or more) old, and an
// applyOps or DDL entry that shows up after later entries were handed out
// stops replay (only CRUD can be applied out of order): on FerretDB only
// its own CRUD entries show up late, so the writer must not add others.
const visibleWithin = 1500 * time.Millisecond

// Shapes writes two collections of one epoch's database only through
// entries of the shapes above, so that the faults (the worker's kills
// above all) land while replay applies them: a user's applyOps, a
// replacement (an update without $v), one-entry transactions (one of them
// creating a collection and an index before inserting), a drop, a
// partialTxn chain, 8.0's batched writes, prepared transactions committed
// and aborted.
//
// Every entry takes a ts the source handed out, never one it made up: an
// update's $currentDate of type timestamp draws from the same counter as
// FerretDB's oplog entries (types.NextTimestamp), so a step asks the
// clock document (in a database no task reads) for as many ts values as
// it has entries and writes its entries at those positions, as FerretDB
// writes its own entries after taking their ts. A step first makes its
// changes on the source (FerretDB logs no DDL; its CRUD entries for them
// then become no-ops in the oplog), then takes its ts values, then writes
// its entries, all within visibleWithin of the first ts or not at all.
// The source's documents and indexes are then what its oplog says: an
// entry that replay loses or applies wrongly shows in the comparison. A
// step that fails leaves its documents uncertain, and repair writes them
// again with plain writes (and drops the DDL collection, logging the
// drop), as Load.Repair does for the other collections.
type Shapes struct {
	db    *mongo.Database
	local *mongo.Collection
	clock *mongo.Collection

	mu        sync.Mutex
	live      map[int32]bool
	ddl       bool // the DDL collection exists
	uncertain map[int32]bool
	ddlUnsure bool
	steps     map[string]int64
	// abandoned counts steps whose ts values came too late to be used.
	abandoned int64
	txn       int64
}

func newShapes(db *mongo.Database) *Shapes {
	c := db.Client()
	return &Shapes{db: db, local: c.Database("local").Collection("oplog.rs"), clock: c.Database(clockDB).Collection("ts"),
		live: map[int32]bool{}, uncertain: map[int32]bool{}, steps: map[string]int64{}}
}

// Steps returns how many steps of each shape were written, and how many
// were abandoned as their ts values came too late.
func (s *Shapes) Steps() (map[string]int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.steps))
	for k, v := range s.steps {
		out[k] = v
	}
	return out, s.abandoned
}

// shapeWrite is one document's change in a step: doc nil deletes it.
type shapeWrite struct {
	id  int32
	doc bson.D
}

// step writes one random shape.
func (s *Shapes) step(ctx context.Context, rng *rand.Rand) {
	s.mu.Lock()
	kind, writes := s.plan(rng)
	ops := s.ops(kind, writes)
	s.txn++
	txn := s.txn
	s.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := s.change(octx, kind, writes)
	if err == nil {
		err = s.logEntries(octx, kind, txn, ops)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// The source may hold the changes without their entries.
		for _, w := range writes {
			if kind != shapeTxnDDL {
				s.uncertain[w.id] = true
			}
		}
		if kind == shapeTxnDDL || kind == shapeDrop {
			s.ddlUnsure = true
		}
		if errors.Is(err, errLate) {
			s.abandoned++
		}
		return
	}
	s.steps[kind]++
	switch kind {
	case shapeAborted:
	case shapeTxnDDL:
		s.ddl = true
	case shapeDrop:
		s.ddl = false
	default:
		for _, w := range writes {
			s.live[w.id] = w.doc != nil
		}
	}
}

// plan draws a step's shape and its documents' changes: two or three
// distinct documents (one for a replacement, none for a drop).
func (s *Shapes) plan(rng *rand.Rand) (string, []shapeWrite) {
	kind := stepKinds[rng.IntN(len(stepKinds))]
	doc := func(id int32) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "shape", Value: kind}, {Key: "v", Value: int32(rng.IntN(1 << 20))}}
	}
	n := 2 + rng.IntN(2)
	var writes []shapeWrite
	switch kind {
	case "ddl":
		kind = shapeTxnDDL
		if s.ddl {
			kind, n = shapeDrop, 0
		}
	case shapeReplacement:
		// A whole document replaced: one that exists.
		n = 0
		for id := range int32(20) {
			if s.live[id] && (len(writes) == 0 || rng.IntN(3) == 0) {
				writes = []shapeWrite{{id: id, doc: doc(id)}}
			}
		}
		if len(writes) == 0 {
			kind, n = shapeApplyOps, 2
		}
	}
	touched := map[int32]bool{}
	for len(writes) < n {
		id := int32(rng.IntN(20))
		if touched[id] {
			continue
		}
		touched[id] = true
		w := shapeWrite{id: id}
		if kind == shapeTxnDDL || !s.live[id] || rng.IntN(3) > 0 {
			w.doc = doc(id)
		}
		writes = append(writes, w)
	}
	return kind, writes
}

// ops returns a step's operations as an applyOps lists them: a create
// and a createIndexes before the inserts of a DDL step.
func (s *Shapes) ops(kind string, writes []shapeWrite) bson.A {
	ops := make(bson.A, 0, len(writes)+2)
	ns := s.db.Name() + "." + shapesColl
	if kind == shapeTxnDDL {
		ns = s.db.Name() + "." + ddlColl
		cmdNS := s.db.Name() + ".$cmd"
		ops = append(ops,
			bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: cmdNS}, {Key: "o", Value: bson.D{{Key: "create", Value: ddlColl}}}},
			bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: cmdNS}, {Key: "o", Value: bson.D{{Key: "createIndexes", Value: ddlColl},
				{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "v", Value: int32(1)}}}, {Key: "name", Value: "v_1"}}}})
	}
	for _, w := range writes {
		key := bson.D{{Key: "_id", Value: w.id}}
		switch {
		case w.doc == nil:
			ops = append(ops, bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "o", Value: key}})
		case kind == shapeReplacement || kind != shapeTxnDDL && s.live[w.id]:
			ops = append(ops, bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: ns}, {Key: "o", Value: w.doc}, {Key: "o2", Value: key}})
		default:
			ops = append(ops, bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "o", Value: w.doc}})
		}
	}
	return ops
}

// change makes a step's changes on the source, then turns the CRUD
// entries FerretDB logged for them into no-ops: the step's own entries,
// at later ts values, stand for them.
func (s *Shapes) change(ctx context.Context, kind string, writes []shapeWrite) error {
	if kind == shapeAborted {
		return nil // an aborted transaction changes nothing
	}
	started := time.Now().UTC().Truncate(time.Millisecond)
	coll := s.db.Collection(shapesColl)
	switch kind {
	case shapeDrop:
		return s.db.Collection(ddlColl).Drop(ctx)
	case shapeTxnDDL:
		coll = s.db.Collection(ddlColl)
		if err := s.db.CreateCollection(ctx, ddlColl); err != nil {
			return err
		}
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "v", Value: int32(1)}}, Options: options.Index().SetName("v_1")}); err != nil {
			return err
		}
	}
	for _, w := range writes {
		key := bson.D{{Key: "_id", Value: w.id}}
		var err error
		if w.doc == nil {
			_, err = coll.DeleteOne(ctx, key)
		} else {
			_, err = coll.ReplaceOne(ctx, key, w.doc, options.Replace().SetUpsert(true))
		}
		if err != nil {
			return err
		}
	}
	done := time.Now().UTC().Truncate(time.Millisecond).Add(time.Millisecond)
	// Rewritten, never deleted: the tailer may have handed them out
	// already (the rewrite can come seconds later on a loaded machine),
	// and a checkpoint saved at an entry that then vanished reads as a
	// rollback on restart. Their ts and term stay; a tailer that read
	// them applied their changes, which the step's entries apply again.
	// Only this step's: the server may still run the rewrite after the
	// step gave up on it, when repair has logged the same documents'
	// writes again.
	_, err := s.local.UpdateMany(ctx, bson.D{{Key: "ns", Value: s.db.Name() + "." + coll.Name()},
		{Key: "wall", Value: bson.D{{Key: "$gte", Value: started}, {Key: "$lte", Value: done}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "chaos shapes: stands for a step's entry"}}}}},
			{Key: "$unset", Value: bson.D{{Key: "o2", Value: ""}}}})
	return err
}

// errLate is a step whose ts values came too late to write its entries.
var errLate = errors.New("the source handed out the step's ts values too long ago")

// logEntries takes ts values from the source and writes the step's
// entries at them.
func (s *Shapes) logEntries(ctx context.Context, kind string, txn int64, ops bson.A) error {
	n := 1
	switch kind {
	case shapeChain, shapeBatched, shapeCommitted, shapeAborted:
		n = 2
	}
	ts, err := s.timestamps(ctx, n)
	if err != nil {
		return err
	}
	// The tailer may hand out entries of the first ts's second from
	// Settle after its end on: the entries must be visible well before.
	deadline := time.Unix(int64(ts[0].T), 0).Add(visibleWithin)
	if time.Until(deadline) <= 0 {
		return errLate
	}
	wall := time.Unix(int64(ts[0].T), 0).UTC()
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte(fmt.Sprintf("chaos-shapes-%04d", txn%10000))}}}
	txnFields := func(prev bson.Timestamp) bson.D {
		return bson.D{{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: txn}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prev}, {Key: "t", Value: int64(1)}}}}
	}
	entry := func(ts bson.Timestamp, ns string, o bson.D, extra bson.D) bson.D {
		return append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: ns},
			{Key: "o", Value: o}, {Key: "wall", Value: wall}}, extra...)
	}
	var entries []any
	switch kind {
	case shapeApplyOps:
		entries = append(entries, entry(ts[0], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops}}, nil))
	case shapeReplacement:
		op := ops[0].(bson.D)
		entries = append(entries, append(bson.D{{Key: "ts", Value: ts[0]}, {Key: "t", Value: int64(1)}}, append(op, bson.E{Key: "wall", Value: wall})...))
	case shapeTxn, shapeTxnDDL:
		entries = append(entries, entry(ts[0], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops}}, txnFields(bson.Timestamp{})))
	case shapeDrop:
		entries = append(entries, entry(ts[0], s.db.Name()+".$cmd", bson.D{{Key: "drop", Value: ddlColl}}, nil))
	case shapeChain:
		entries = append(entries,
			entry(ts[0], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops[:1]}, {Key: "partialTxn", Value: true}}, txnFields(bson.Timestamp{})),
			entry(ts[1], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops[1:]}, {Key: "count", Value: int64(len(ops))}}, txnFields(ts[0])))
	case shapeBatched:
		// A retryable insertMany or deleteMany of 8.0: batches linked by
		// prevOpTime, each applied on its own.
		batched := func(prev bson.Timestamp) bson.D {
			return append(txnFields(prev), bson.E{Key: "multiOpType", Value: int32(1)})
		}
		entries = append(entries,
			entry(ts[0], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops[:1]}}, batched(bson.Timestamp{})),
			entry(ts[1], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops[1:]}}, batched(ts[0])))
	case shapeCommitted, shapeAborted:
		entries = append(entries, entry(ts[0], "admin.$cmd", bson.D{{Key: "applyOps", Value: ops}, {Key: "prepare", Value: true}}, txnFields(bson.Timestamp{})))
		if kind == shapeAborted {
			entries = append(entries, entry(ts[1], "admin.$cmd", bson.D{{Key: "abortTransaction", Value: int32(1)}}, txnFields(ts[0])))
		} else {
			entries = append(entries, entry(ts[1], "admin.$cmd", bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: ts[1]}}, txnFields(ts[0])))
		}
	}
	ictx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// One insert: FerretDB inserts a batch whole or not at all.
	_, err = s.local.InsertMany(ictx, entries)
	return err
}

// timestamps asks the source for n ts values from the counter its oplog
// entries take theirs from, in ascending order.
func (s *Shapes) timestamps(ctx context.Context, n int) ([]bson.Timestamp, error) {
	set := bson.D{}
	for i := range n {
		set = append(set, bson.E{Key: fmt.Sprintf("t%d", i), Value: bson.D{{Key: "$type", Value: "timestamp"}}})
	}
	raw, err := s.clock.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: "clock"}}, bson.D{{Key: "$currentDate", Value: set}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Raw()
	if err != nil {
		return nil, fmt.Errorf("take ts values: %w", err)
	}
	out := make([]bson.Timestamp, n)
	for i := range out {
		t, inc, ok := raw.Lookup(fmt.Sprintf("t%d", i)).TimestampOK()
		if !ok {
			return nil, fmt.Errorf("take ts values: no timestamp t%d in %s", i, raw)
		}
		out[i] = bson.Timestamp{T: t, I: inc}
	}
	slices.SortFunc(out, func(a, b bson.Timestamp) int { return a.Compare(b) })
	return out, nil
}

// repair writes again, with plain writes whose entries stay in the oplog,
// every shapes document a failed step may have left between the source
// and its entries; a DDL step that failed is undone with a drop, logged
// as a step logs one. The caller holds the load paused.
func (s *Shapes) repair(ctx context.Context) (int, error) {
	s.mu.Lock()
	ids := make([]int32, 0, len(s.uncertain))
	for id := range s.uncertain {
		ids = append(ids, id)
	}
	ddl := s.ddlUnsure
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
	if !ddl {
		return len(ids), nil
	}
	s.mu.Lock()
	s.txn++
	txn := s.txn
	s.mu.Unlock()
	for try := 0; ; try++ {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.change(octx, shapeDrop, nil)
		if err == nil {
			err = s.logEntries(octx, shapeDrop, txn, nil)
		}
		cancel()
		if err == nil {
			break
		}
		if try == 5 {
			return 0, fmt.Errorf("repair %s: %w", ddlColl, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.mu.Lock()
	s.ddl, s.ddlUnsure = false, false
	s.mu.Unlock()
	return len(ids) + 1, nil
}
