package oplog

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// retryableInsertMany returns a retryable insertMany of n documents as
// MongoDB 8.0 logs it (op_observer_impl.cpp, onBatchedWriteCommit with
// multiOpType kApplyOpsAppliedSeparately): one applyOps per batch of at
// most 64 inserts, each with the session's lsid and txnNumber, multiOpType
// 1, and a prevOpTime naming the previous batch (a zero ts for the first).
// The first entry is at ts index first.
func retryableInsertMany(ns string, n int, first uint32) []bson.D {
	var (
		out  []bson.D
		prev bson.Timestamp
	)
	for start, i := 0, first; start < n; start, i = start+64, i+1 {
		var ops []bson.D
		for id := start; id < min(start+64, n); id++ {
			ops = append(ops, bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "ui", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}},
				{Key: "o", Value: doc(id)}, {Key: "o2", Value: doc(id)}, {Key: "stmtId", Value: int32(id)}})
		}
		out = append(out, with(outer(i, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: ops}},
			"lsid", lsidOf(9), "txnNumber", int64(4), "prevOpTime", bson.D{{Key: "ts", Value: prev}, {Key: "t", Value: int64(1)}},
			"multiOpType", int32(1)))
		prev = tsAt(i)
	}
	return out
}

// TestAssemblerBatchedWrites: 8.0's batched writes are units of their own
// (no barrier), whether linked by a session (retryable insertMany) or,
// when too large for one entry, chained by prevOpTime without a session
// (batched_write_context.cpp: partialTxn entries, no lsid or txnNumber).
func TestAssemblerBatchedWrites(t *testing.T) {
	t.Run("retryable insertMany of 500 documents", func(t *testing.T) {
		entries := retryableInsertMany("a.b", 500, 10)
		if len(entries) != 8 {
			t.Fatalf("%d batches, want 8 (7 of 64 and one of 52)", len(entries))
		}
		a := NewAssembler()
		units := feed(t, a, entries...)
		if len(units) != 8 {
			t.Fatalf("%d units, want one per batch", len(units))
		}
		docs := 0
		for i, u := range units {
			// TS == FirstTS: the replayer dispatches its operations to
			// the writers without draining them first.
			if u.TS != tsAt(10+uint32(i)) || u.FirstTS != u.TS {
				t.Errorf("unit %d: ts %v first %v, want both %v", i, u.TS, u.FirstTS, tsAt(10+uint32(i)))
			}
			docs += len(u.Ops)
		}
		if docs != 500 {
			t.Errorf("%d inserts, want 500", docs)
		}
		if s := a.Status(); s.OpenTxns != 0 {
			t.Errorf("%d transactions left open", s.OpenTxns)
		}
	})
	t.Run("sessionless chain", func(t *testing.T) {
		a := NewAssembler()
		units := feed(t, a,
			with(outer(20, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 1), deleteOp("a.b", 2)}}, {Key: "partialTxn", Value: true}},
				"prevOpTime", bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}),
			with(outer(21, "i", "a.c"), "o", doc(7)), // another write between the chain's entries
			with(outer(22, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 3)}}, {Key: "partialTxn", Value: true}},
				"prevOpTime", bson.D{{Key: "ts", Value: tsAt(20)}, {Key: "t", Value: int64(1)}}),
			with(outer(23, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 4)}}, {Key: "count", Value: int64(4)}},
				"prevOpTime", bson.D{{Key: "ts", Value: tsAt(22)}, {Key: "t", Value: int64(1)}}),
		)
		if len(units) != 2 {
			t.Fatalf("%d units, want the insert and the chain", len(units))
		}
		checkUnit(t, units[1], 23, 20, true, `d a.b {"$numberInt":"1"}`, `d a.b {"$numberInt":"2"}`, `d a.b {"$numberInt":"3"}`, `d a.b {"$numberInt":"4"}`)
	})
	t.Run("sessionless chain checkpointed midway", func(t *testing.T) {
		first := with(outer(30, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 1)}}, {Key: "partialTxn", Value: true}},
			"prevOpTime", bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}})
		last := with(outer(31, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 2)}}},
			"prevOpTime", bson.D{{Key: "ts", Value: tsAt(30)}, {Key: "t", Value: int64(1)}})
		a := NewAssembler()
		feed(t, a, first)
		b := NewAssembler()
		if err := b.Recover(a.Checkpoint()); err != nil {
			t.Fatal(err)
		}
		// The reader resumes below the chain and reads its first entry again.
		units := feed(t, b, first, last)
		if len(units) != 1 {
			t.Fatalf("%d units, want 1", len(units))
		}
		checkUnit(t, units[0], 31, 30, true, `d a.b {"$numberInt":"1"}`, `d a.b {"$numberInt":"2"}`)
	})
}
