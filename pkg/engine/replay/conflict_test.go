package replay

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// skKeys is a source whose collections are sharded on {sk: 1}.
type skKeys struct{}

func (skKeys) Key(context.Context, catalog.Namespace) (targetsharding.Key, error) {
	return targetsharding.Key{{Name: "sk"}}, nil
}

func (skKeys) Current(context.Context, catalog.Namespace, targetsharding.Key, []bson.RawValue) ([]bson.Raw, error) {
	return nil, nil
}

// TestIDMovedAcrossShards runs an application's move of a document to
// another shard (a delete on one shard, an insert of the same _id with
// another shard-key value on another, no transaction) through one
// subtask per shard with the default options, in both orders and with
// inserts logged with and without their document key, and checks the
// target's documents and what the subtasks counted.
func TestIDMovedAcrossShards(t *testing.T) {
	type want struct {
		id     int64
		exists bool
		sk, v  int64
	}
	ins := map[bool]func(id, sk, v int64) bson.D{false: insOp, true: insOp44}
	tests := []struct {
		name string
		logs func(t *testing.T, ins func(id, sk, v int64) bson.D) oplogs
		// target is what the target holds before replay (the copy).
		target    []bson.D
		lag, lead string
		want      []want
		// waits and stepped are the conflict waits and the writes
		// stepped over, summed over the shards.
		waits, stepped int64
	}{{
		// The old shard lags: the new document lands first, the old
		// shard's insert meets it, waits, meets it again and is stepped
		// over; its update and delete, filtered on {sk: 5, _id},
		// match nothing.
		name: "old shard behind",
		logs: func(t *testing.T, ins func(id, sk, v int64) bson.D) oplogs {
			return oplogs{}.add(t, "s0", 1, ins(1, 5, 1)).add(t, "s0", 2, setOp(1, 5, 5, 2)).add(t, "s0", 3, delOp(1, 5)).
				add(t, "s1", 4, ins(1, 50, 7)).add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s0", lead: "s1",
		want:  []want{{id: 1, exists: true, sk: 50, v: 7}},
		waits: 1, stepped: 1,
	}, {
		// The new shard's insert meets the old document (copied before
		// replay started), waits until the old shard has deleted it,
		// and lands.
		name:   "new shard ahead of the old one's delete",
		target: []bson.D{udoc(1, 5, 1)},
		logs: func(t *testing.T, ins func(id, sk, v int64) bson.D) oplogs {
			return oplogs{}.add(t, "s0", 3, delOp(1, 5)).
				add(t, "s1", 4, ins(1, 50, 7)).add(t, "s1", 5, setOp(1, 50, 50, 8)).add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s0", lead: "s1",
		want:  []want{{id: 1, exists: true, sk: 50, v: 8}},
		waits: 1, stepped: 0,
	}, {
		// Moved there and back: the last document wins whatever the
		// order.
		name: "moved there and back",
		logs: func(t *testing.T, ins func(id, sk, v int64) bson.D) oplogs {
			return oplogs{}.add(t, "s0", 1, ins(1, 5, 1)).add(t, "s0", 2, delOp(1, 5)).
				add(t, "s1", 3, ins(1, 50, 2)).add(t, "s1", 4, delOp(1, 50)).
				add(t, "s0", 5, ins(1, 6, 3)).add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s1", lead: "s0",
		want: []want{{id: 1, exists: true, sk: 6, v: 3}},
	}}
	for _, tc := range tests {
		for _, noKey := range []bool{false, true} {
			name := tc.name
			if noKey {
				name += ", inserts without o2"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := newCluster(t, tc.logs(t, ins[noKey]))
				c.sourceKeys = skKeys{}
				c.store.docs = map[int64]bson.D{}
				for _, d := range tc.target {
					c.store.docs[d[0].Value.(int64)] = d
				}
				start := time.Now()
				lead := c.readAll(tc.lead)
				c.open[tc.lag] = func() bool {
					return lead() && time.Since(start) > 50*time.Millisecond || time.Since(start) > 300*time.Millisecond
				}
				c.start(ctx)
				defer c.stop()
				if err := c.wait(ctx, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				for _, w := range tc.want {
					d, ok := c.store.get(w.id)
					if ok != w.exists {
						t.Fatalf("_id %d: exists %v on the target, want %v (%v)", w.id, ok, w.exists, d)
					}
					if ok && (field(d, "sk") != w.sk || field(d, "v") != w.v) {
						t.Fatalf("_id %d is %v on the target, want sk %d v %d", w.id, d, w.sk, w.v)
					}
				}
				var waits, stepped, met int64
				for _, run := range c.runs {
					h := run.r.Status().Holds
					waits, stepped, met = waits+h.ConflictWaits, stepped+h.SteppedOver, met+h.Conflicts
				}
				if tc.waits > 0 && (waits != tc.waits || stepped != tc.stepped || met != tc.waits) {
					t.Errorf("%d conflicts met, %d waits, %d stepped over; want %d, %d, %d", met, waits, stepped, tc.waits, tc.waits, tc.stepped)
				}
			})
		}
	}
}

// TestConflictWaitBesideCommitWait is the cycle a commit wait could
// close with a write waiting on another shard: s0 waits at its commit of
// a two-shard transaction (ts 17) whose part on s1 is still prepared,
// while s1's insert at 23, logged before s1's commit entry, meets the
// document s0 deletes at 16 and waits for s0 to pass 23. s1 publishes
// what it waits for (its need, 23, past s0's commit), so s0 applies its
// part without waiting for s1's; s0 then passes 23, and s1's insert
// lands.
func TestConflictWaitBesideCommitWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := oplogs{}.add(t, "s0", 10, prepareOp(1, insOp(2, 5, 1))).add(t, "s0", 16, delOp(1, 7)).
		add(t, "s0", 17, commitOp(1, at(15), at(10))).add(t, "s0", 30, noopOp()).
		add(t, "s1", 12, prepareOp(1, delOp(3, 60))).add(t, "s1", 23, insOp(1, 70, 2)).
		add(t, "s1", 25, commitOp(1, at(15), at(12))).add(t, "s1", 31, noopOp())
	c := newCluster(t, logs)
	c.store.docs = map[int64]bson.D{1: udoc(1, 7, 1), 3: udoc(3, 60, 1)}
	start := time.Now()
	lead := c.readAll("s1")
	c.open["s0"] = func() bool {
		return lead() && time.Since(start) > 50*time.Millisecond || time.Since(start) > 300*time.Millisecond
	}
	c.start(ctx)
	defer c.stop()
	if err := c.wait(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for id, w := range map[int64][2]int64{1: {70, 2}, 2: {5, 1}} {
		d, ok := c.store.get(id)
		if !ok || field(d, "sk") != w[0] || field(d, "v") != w[1] {
			t.Errorf("_id %d is %v (present %v), want sk %d v %d", id, d, ok, w[0], w[1])
		}
	}
	if d, ok := c.store.get(3); ok {
		t.Errorf("_id 3 is %v, want deleted", d)
	}
}

// TestOnID: a duplicate key error counts as one on _id by its
// keyPattern, else by the index its message names, else (a server that
// names none, as FerretDB v1) as one.
func TestOnID(t *testing.T) {
	kp := func(d bson.D) bson.Raw { b, _ := bson.Marshal(bson.D{{Key: "keyPattern", Value: d}}); return b }
	for _, c := range []struct {
		name string
		we   mongo.BulkWriteError
		want bool
	}{
		{"keyPattern _id", mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000, Details: kp(bson.D{{Key: "_id", Value: 1}})}}, true},
		{"keyPattern email", mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000, Details: kp(bson.D{{Key: "email", Value: 1}})}}, false},
		{"message _id_", mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000, Message: "E11000 duplicate key error collection: a.b index: _id_ dup key: { _id: 1 }"}}, true},
		{"message email_1", mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000, Message: "E11000 duplicate key error collection: a.b index: email_1 dup key: { email: 1 }"}}, false},
		{"no index named", mongo.BulkWriteError{WriteError: mongo.WriteError{Code: 11000, Message: "E11000 duplicate key error collection: a.b"}}, true},
	} {
		if got := onID(c.we); got != c.want {
			t.Errorf("%s: onID %v, want %v", c.name, got, c.want)
		}
	}
}

// TestConflictWaitsForAnOpenTransaction: s0 deletes X in a prepared
// transaction committed at 12, and the application then inserts X with
// another shard key on s1 at 15; s0 logs its commit entry only at 20.
// s0's durable position passes 15 with the transaction saved as state,
// so s1's insert, which meets X on the target, must also wait for s0's
// open transaction (board.Position.OpenFrom) before it goes again, or it
// is stepped over and the delete then leaves no X.
func TestConflictWaitsForAnOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := oplogs{}.add(t, "s0", 10, prepareOp(1, delOp(1, 5))).add(t, "s0", 16, noopOp()).
		add(t, "s0", 20, commitOp(1, at(12), at(10))).add(t, "s0", 30, noopOp()).
		add(t, "s1", 15, insOp(1, 50, 7)).add(t, "s1", 31, noopOp())
	c := newCluster(t, logs)
	c.store.docs = map[int64]bson.D{1: udoc(1, 5, 1)}
	// s0 stops before its commit entry until s1's insert has met X and
	// waited a while (s1 publishes its need, 15), or s1 went past it.
	var met time.Time
	c.until = map[string]func() (int, bool){"s0": func() (int, bool) {
		ps, _ := c.board.Positions(context.Background())
		waiting, past := false, false
		for _, p := range ps {
			waiting = waiting || p.Shard == "s1" && p.Needs.Equal(at(15))
			past = past || p.Shard == "s1" && !p.Applied.Before(at(15))
		}
		if past {
			return 2, true // s1 did not wait
		}
		if !waiting {
			return 2, false
		}
		if met.IsZero() {
			met = time.Now()
		}
		return 2, time.Since(met) > 100*time.Millisecond
	}}
	c.start(ctx)
	defer c.stop()
	if err := c.wait(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	d, ok := c.store.get(1)
	if !ok || field(d, "sk") != 50 || field(d, "v") != 7 {
		t.Fatalf("_id 1 is %v (present %v), want sk 50 v 7", d, ok)
	}
}
