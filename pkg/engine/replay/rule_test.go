package replay

import (
	"context"
	"testing"
	"time"
)

// TestShardRule runs the interleavings MongoDB allows around chunk
// migrations, prepared transactions and restarts through one subtask per
// shard, the donor's reader held back until the recipient has read
// everything, and checks the target's documents.
func TestShardRule(t *testing.T) {
	type want struct {
		id     int64
		exists bool
		sk, v  int64
	}
	tests := []struct {
		name string
		logs func(t *testing.T) oplogs
		// lag is the shard whose reader waits until lead read its oplog.
		lag, lead string
		// kill, when set, kills and restarts a subtask once the lead
		// subtask has read everything.
		kill string
		want []want
	}{{
		// Case 1: the donor deletes X, the chunk migrates empty (no
		// fromMigrate entry), the application inserts X again on the
		// recipient.
		name: "empty migration, document reinserted on the recipient",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, insOp(1, 5, 1)).add(t, "s0", 2, delOp(1, 5)).
				add(t, "s1", 3, rangeTask(1, "s0")).add(t, "s1", 4, rangeTaskDone(1)).add(t, "s1", 5, insOp(1, 5, 2)).
				add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s0", lead: "s1",
		want: []want{{id: 1, exists: true, sk: 5, v: 2}},
	}, {
		// Case 2: X is deleted on the donor after the recipient's last
		// fromMigrate entry (its batch was not cloned yet), then
		// inserted again on the recipient after the commit.
		name: "delete of a document not yet cloned",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, insOp(1, 5, 1)).add(t, "s0", 2, insOp(2, 6, 1)).
				add(t, "s1", 3, rangeTask(1, "s0")).add(t, "s1", 4, migrateOp(2, 6, 1)).
				add(t, "s0", 5, delOp(1, 5)).
				add(t, "s1", 6, rangeTaskDone(1)).add(t, "s1", 7, insOp(1, 5, 2)).add(t, "s1", 8, setOp(2, 6, 6, 2)).
				add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s0", lead: "s1",
		want: []want{{id: 1, exists: true, sk: 5, v: 2}, {id: 2, exists: true, sk: 6, v: 2}},
	}, {
		// Case 3: a migration's entries lie between a prepare and its
		// commit; the subtask is killed while its writes are held, with
		// its checkpoint inside the transaction, and restarted from it.
		name: "restart from a checkpoint inside a prepared transaction",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, insOp(1, 5, 1)).
				add(t, "s0", 2, prepareOp(1, setOp(1, 5, 5, 2))).add(t, "s1", 3, prepareOp(1, insOp(3, 50, 1))).
				add(t, "s0", 4, rangeTask(1, "s1")).add(t, "s0", 5, migrateOp(2, 6, 1)).add(t, "s0", 6, rangeTaskDone(1)).
				add(t, "s0", 8, commitOp(1, at(7), at(2))).add(t, "s0", 9, insOp(4, 7, 1)).
				add(t, "s1", 10, commitOp(1, at(7), at(3))).
				add(t, "s0", 20, noopOp()).add(t, "s1", 21, noopOp())
		},
		lag: "s1", lead: "s0", kill: "s0",
		want: []want{{id: 1, exists: true, sk: 5, v: 2}, {id: 3, exists: true, sk: 50, v: 1}, {id: 4, exists: true, sk: 7, v: 1}},
	}, {
		// Case 4: on s0 a transaction that inserts is prepared, a
		// migration into s0 follows, then the commit; s1's part inserts
		// too and waits at the same commit.
		name: "prepared transaction across a migration",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, prepareOp(1, insOp(1, 5, 1))).add(t, "s1", 2, prepareOp(1, insOp(2, 50, 1))).
				add(t, "s0", 3, rangeTask(1, "s1")).add(t, "s0", 4, migrateOp(3, 6, 1)).add(t, "s1", 5, delOp(3, 6)).
				add(t, "s0", 6, rangeTaskDone(1)).add(t, "s0", 7, insOp(4, 6, 1)).
				add(t, "s1", 9, commitOp(1, at(8), at(2))).add(t, "s0", 10, commitOp(1, at(8), at(1))).
				add(t, "s0", 20, noopOp()).add(t, "s1", 21, noopOp())
		},
		want: []want{{id: 1, exists: true, sk: 5, v: 1}, {id: 2, exists: true, sk: 50, v: 1}, {id: 3}, {id: 4, exists: true, sk: 6, v: 1}},
	}, {
		// Case 5: two transactions prepared on both shards, committed
		// in opposite orders: each shard's first commit waits for the
		// other shard, which waits at the other transaction's commit.
		name: "commits in opposite orders on two shards",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, prepareOp(1, insOp(1, 5, 1))).add(t, "s0", 2, prepareOp(2, insOp(2, 6, 1))).
				add(t, "s1", 3, prepareOp(1, insOp(3, 50, 1))).add(t, "s1", 4, prepareOp(2, insOp(4, 51, 1))).
				add(t, "s0", 7, commitOp(1, at(5), at(1))).add(t, "s1", 8, commitOp(2, at(6), at(4))).
				add(t, "s0", 10, commitOp(2, at(6), at(2))).add(t, "s1", 11, commitOp(1, at(5), at(3))).
				add(t, "s0", 20, noopOp()).add(t, "s1", 21, noopOp())
		},
		want: []want{{id: 1, exists: true, sk: 5, v: 1}, {id: 2, exists: true, sk: 6, v: 1}, {id: 3, exists: true, sk: 50, v: 1}, {id: 4, exists: true, sk: 51, v: 1}},
	}, {
		// Case 7: X deleted on s0, an X with another shard-key value
		// inserted on s1 (MongoDB enforces _id uniqueness per shard).
		name: "_id reused on another shard (the old insert meets the new document and is stepped over)",
		logs: func(t *testing.T) oplogs {
			return oplogs{}.add(t, "s0", 1, insOp(1, 5, 1)).add(t, "s0", 2, delOp(1, 5)).
				add(t, "s1", 3, insOp(1, 50, 7)).add(t, "s0", 9, noopOp()).add(t, "s1", 10, noopOp())
		},
		lag: "s0", lead: "s1",
		want: []want{{id: 1, exists: true, sk: 50, v: 7}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := newCluster(t, tc.logs(t))
			if tc.lag != "" {
				// The lagging reader starts once the leading one has read
				// everything it could, or waits.
				start := time.Now()
				lead := c.readAll(tc.lead)
				c.open[tc.lag] = func() bool {
					return lead() && time.Since(start) > 50*time.Millisecond || time.Since(start) > 300*time.Millisecond
				}
			}
			c.start(ctx)
			defer c.stop()
			if tc.kill != "" {
				time.Sleep(150 * time.Millisecond)
				c.kill(ctx, tc.kill)
			}
			if err := c.wait(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				d, ok := c.store.get(w.id)
				if ok != w.exists {
					t.Errorf("_id %d: exists %v on the target, want %v (%v)", w.id, ok, w.exists, d)
					continue
				}
				if ok && (field(d, "sk") != w.sk || field(d, "v") != w.v) {
					t.Errorf("_id %d is %v on the target, want sk %d v %d", w.id, d, w.sk, w.v)
				}
			}
		})
	}
}

// TestShardRuleReapplied is case 6: a subtask restarted from a
// checkpoint below a replacement and a later shard-key change of the same
// document, both applied before: the replacement's upsert, filtered on
// the old key, meets the newer document (E11000 on _id) and is stepped
// over; the run goes on and the document ends as the source has it.
func TestShardRuleReapplied(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := oplogs{}.add(t, "s0", 1, insOp(1, 5, 1)).add(t, "s0", 2, replOp(1, 5, 2)).add(t, "s0", 3, setOp(1, 5, 6, 3)).
		add(t, "s0", 4, noopOp())
	c := newCluster(t, logs)
	c.start(ctx)
	if err := c.wait(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.stop()
	// A kill after the writes, before a checkpoint past the first entry.
	c.saved["s0"] = savedState{ts: at(1), state: c.saved["s0"].state}
	c.board = nil
	c2 := newCluster(t, logs)
	c2.store.docs = c.store.docs
	c2.saved = c.saved
	c2.start(ctx)
	defer c2.stop()
	if err := c2.wait(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	d, _ := c2.store.get(1)
	if field(d, "sk") != 6 || field(d, "v") != 3 {
		t.Errorf("document %v, want sk 6 v 3", d)
	}
	if n := c2.runs["s0"].r.Status().StaleUpserts; n != 1 {
		t.Errorf("%d stale upserts stepped over, want 1", n)
	}
}
