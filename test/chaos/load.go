package chaos

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The workload's collections in each epoch's database.
const (
	docsColl     = "docs"
	countersColl = "counters"
	counters     = 64
)

// idFor returns the _id of document i: the types rotate through int32,
// int64, string, ObjectId and an embedded document, so one collection holds
// mixed _id types as in the held-out runs that wedged a target.
func idFor(i int) any {
	switch i % 5 {
	case 0:
		return int32(i)
	case 1:
		return int64(1)<<40 + int64(i)
	case 2:
		return fmt.Sprintf("doc-%07d", i)
	case 3:
		var oid bson.ObjectID
		binary.BigEndian.PutUint64(oid[4:], uint64(i))
		return oid
	default:
		return bson.D{{Key: "k", Value: int32(i)}, {Key: "s", Value: "x"}}
	}
}

func newDoc(rng *rand.Rand, i int) bson.D {
	return bson.D{{Key: "_id", Value: idFor(i)}, {Key: "grp", Value: int32(rng.IntN(20))},
		{Key: "name", Value: fmt.Sprintf("n%d", rng.IntN(100000))}, {Key: "qty", Value: int64(rng.IntN(1000))},
		{Key: "pad", Value: strings.Repeat("p", 100+rng.IntN(200))},
		{Key: "tags", Value: bson.A{"t" + fmt.Sprint(rng.IntN(9)), int32(rng.IntN(50))}}}
}

// Load is the live workload on one epoch's database: each of its writers
// owns the documents whose number is congruent to its index, so no two
// writes to one document are ever in flight together (FerretDB logs a
// write's oplog entry after the write itself, so two concurrent writes to
// one document could be logged in the other order). A write that fails is
// remembered: it may have changed the data without reaching the oplog (a
// source killed between the two), and Repair writes those documents again.
type Load struct {
	db      *mongo.Database
	writers int
	gate    sync.RWMutex

	// shapes writes two more collections only through entries of shapes
	// FerretDB never logs (shapes.go).
	shapes *Shapes

	mu        sync.Mutex
	next      []int // next new document number per writer
	live      []map[int]bool
	uncertain map[int]bool
	ops, errs int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Seed writes n documents and the counters, and the indexes the copy
// builds.
func Seed(ctx context.Context, db *mongo.Database, seed uint64, n, writers int) (*Load, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	l := &Load{db: db, writers: writers, uncertain: map[int]bool{}, shapes: newShapes(db)}
	for w := 0; w < writers; w++ {
		l.live = append(l.live, map[int]bool{})
		l.next = append(l.next, n+w)
	}
	docs := make([]any, 0, n)
	for i := 0; i < n; i++ {
		docs = append(docs, newDoc(rng, i))
		l.live[i%writers][i] = true
	}
	for len(docs) > 0 {
		k := min(len(docs), 500)
		if _, err := db.Collection(docsColl).InsertMany(ctx, docs[:k]); err != nil {
			return nil, fmt.Errorf("seed %s: %w", docsColl, err)
		}
		docs = docs[k:]
	}
	cs := make([]any, counters)
	for i := range cs {
		cs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "n", Value: int64(0)}}
	}
	if _, err := db.Collection(countersColl).InsertMany(ctx, cs); err != nil {
		return nil, fmt.Errorf("seed %s: %w", countersColl, err)
	}
	_, err := db.Collection(docsColl).Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "grp", Value: 1}}}, {Keys: bson.D{{Key: "name", Value: 1}, {Key: "qty", Value: -1}}},
		{Keys: bson.D{{Key: "qty", Value: 1}}}, {Keys: bson.D{{Key: "tags", Value: 1}}},
	})
	if err != nil {
		return nil, fmt.Errorf("seed indexes: %w", err)
	}
	return l, nil
}

// Start runs the writers at about rate operations per second in all.
func (l *Load) Start(seed uint64, rate int) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for w := 0; w < l.writers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+100))
			pause := time.Second * time.Duration(l.writers) / time.Duration(rate)
			for ctx.Err() == nil {
				l.gate.RLock()
				l.step(ctx, rng, w)
				l.gate.RUnlock()
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	l.startShapes(ctx, seed)
}

// startShapes runs the shapes writer: a step, then a pause of 0.4-1 s.
func (l *Load) startShapes(ctx context.Context, seed uint64) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 7))
		for ctx.Err() == nil {
			l.gate.RLock()
			l.shapes.step(ctx, rng)
			l.gate.RUnlock()
			select {
			case <-ctx.Done():
			case <-time.After(400*time.Millisecond + time.Duration(rng.IntN(600))*time.Millisecond):
			}
		}
	}()
}

// ShapeSteps returns the shapes writer's steps by shape, and those it
// abandoned (Shapes.Steps).
func (l *Load) ShapeSteps() (map[string]int64, int64) { return l.shapes.Steps() }

// Stop ends the writers.
func (l *Load) Stop() {
	if l.cancel != nil {
		l.cancel()
		l.wg.Wait()
		l.cancel = nil
	}
}

// Pause waits for the writes in flight and holds the writers until Resume.
func (l *Load) Pause() { l.gate.Lock() }

// Resume lets the writers go on.
func (l *Load) Resume() { l.gate.Unlock() }

// Counts returns the writes attempted and those that failed.
func (l *Load) Counts() (ops, errs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops, l.errs
}

// step applies one random write of writer w: an insert, a $set, an $inc on
// a document or a counter, a replacement, an $unset, or a delete.
func (l *Load) step(ctx context.Context, rng *rand.Rand, w int) {
	l.mu.Lock()
	i := -1
	n := rng.IntN(100)
	if n >= 15 && len(l.live[w]) > 0 {
		// A random live document of this writer (map order is random
		// enough and the seed still fixes the operation mix).
		k := rng.IntN(len(l.live[w]))
		for id := range l.live[w] {
			if k == 0 {
				i = id
				break
			}
			k--
		}
	}
	l.mu.Unlock()
	coll := l.db.Collection(docsColl)
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	switch {
	case i < 0:
		l.mu.Lock()
		i = l.next[w]
		l.next[w] += l.writers
		l.mu.Unlock()
		_, err = coll.InsertOne(octx, newDoc(rng, i))
		if err == nil {
			l.mu.Lock()
			l.live[w][i] = true
			l.mu.Unlock()
		}
	case n < 40:
		_, err = coll.UpdateOne(octx, bson.D{{Key: "_id", Value: idFor(i)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: fmt.Sprintf("u%d", rng.IntN(100000))}, {Key: "sub.v", Value: int32(rng.IntN(9))}}}})
	case n < 55:
		_, err = coll.UpdateOne(octx, bson.D{{Key: "_id", Value: idFor(i)}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "qty", Value: int64(1)}}}})
	case n < 70:
		// Counters are shared by the writers; each writer incs its own.
		c := int32(w + l.writers*rng.IntN(counters/l.writers))
		_, err = l.db.Collection(countersColl).UpdateOne(octx, bson.D{{Key: "_id", Value: c}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(1)}}}})
		if err != nil {
			i = -1 - int(c) // a counter: remembered as a negative number
		}
	case n < 80:
		d := newDoc(rng, i)
		_, err = coll.ReplaceOne(octx, bson.D{{Key: "_id", Value: idFor(i)}}, d[1:])
	case n < 88:
		_, err = coll.UpdateOne(octx, bson.D{{Key: "_id", Value: idFor(i)}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "tags", Value: ""}}}})
	default:
		_, err = coll.DeleteOne(octx, bson.D{{Key: "_id", Value: idFor(i)}})
		if err == nil {
			l.mu.Lock()
			delete(l.live[w], i)
			l.mu.Unlock()
		}
	}
	l.mu.Lock()
	l.ops++
	if err != nil {
		l.errs++
		l.uncertain[i] = true
		if i >= 0 {
			// It may exist or not: keep it among the writer's documents,
			// later writes to a missing one change nothing.
			l.live[w][i] = true
		}
	}
	l.mu.Unlock()
	if err != nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// Repair writes again every document whose write failed, so that whatever
// the source holds for it reaches its oplog: a document that exists gets a
// $set, a missing one is inserted and deleted. It returns how many it
// repaired; the caller holds the load paused.
func (l *Load) Repair(ctx context.Context) (int, error) {
	l.mu.Lock()
	ids := make([]int, 0, len(l.uncertain))
	for i := range l.uncertain {
		ids = append(ids, i)
	}
	l.mu.Unlock()
	for _, i := range ids {
		coll, id := l.db.Collection(docsColl), idFor(i)
		if i < 0 {
			coll, id = l.db.Collection(countersColl), int32(-1-i)
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := coll.UpdateOne(octx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "repaired", Value: int64(1)}}}})
		if err == nil && res.MatchedCount == 0 {
			if _, err = coll.InsertOne(octx, bson.D{{Key: "_id", Value: id}}); err == nil {
				_, err = coll.DeleteOne(octx, bson.D{{Key: "_id", Value: id}})
			}
		}
		cancel()
		if err != nil {
			return 0, fmt.Errorf("repair %v: %w", id, err)
		}
		l.mu.Lock()
		delete(l.uncertain, i)
		l.mu.Unlock()
	}
	n, err := l.shapes.repair(ctx)
	return len(ids) + n, err
}
