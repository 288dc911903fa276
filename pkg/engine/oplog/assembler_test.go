package oplog

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// feed adds entries in order and returns the units emitted.
func feed(t *testing.T, a *Assembler, entries ...bson.D) []Unit {
	t.Helper()
	var units []Unit
	for _, d := range entries {
		u, ok, err := a.Add(mustParse(t, d))
		if err != nil {
			t.Fatalf("Add(%v): %v", d, err)
		}
		if ok {
			units = append(units, u)
		}
	}
	return units
}

func doc(id int) bson.D { return bson.D{{Key: "_id", Value: int32(id)}} }

// checkUnit compares a unit's ts, first ts and operations.
func checkUnit(t *testing.T, u Unit, ts, first uint32, txn bool, ops ...string) {
	t.Helper()
	if u.TS != tsAt(ts) || u.FirstTS != tsAt(first) || u.Txn != txn {
		t.Errorf("unit ts %v first %v txn %v; want %v %v %v", u.TS, u.FirstTS, u.Txn, tsAt(ts), tsAt(first), txn)
	}
	if got := describeOps(u); !slices.Equal(got, ops) {
		t.Errorf("unit ops\n got %q\nwant %q", got, ops)
	}
	for _, op := range u.Ops {
		if op.TS() != u.TS {
			t.Errorf("op %s has ts %v, unit ts %v", op, op.TS(), u.TS)
		}
	}
}

func TestAssemblerPassThrough(t *testing.T) {
	a := NewAssembler()
	units := feed(t, a,
		with(outer(1, "i", "a.b"), "o", doc(1)),
		with(outer(2, "n", ""), "o", bson.D{{Key: "msg", Value: "periodic noop"}}),
		with(outer(3, "c", "a.$cmd"), "o", bson.D{{Key: "drop", Value: "b"}}),
	)
	if len(units) != 3 {
		t.Fatalf("%d units, want 3", len(units))
	}
	checkUnit(t, units[0], 1, 1, false, `i a.b {"$numberInt":"1"}`)
	checkUnit(t, units[1], 2, 2, false, "n  ")
	checkUnit(t, units[2], 3, 3, false, "c a.$cmd ")
}

func TestAssemblerApplyOps(t *testing.T) {
	// A user's applyOps command (no session) and a one-entry transaction.
	plain := with(outer(5, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{
		insertOp("a.b", doc(1)),
		bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "x", Value: 1}}}}}}}, {Key: "o2", Value: doc(1)}},
		deleteOp("a.c", 2),
		// a nested applyOps is unwrapped too
		bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"}, {Key: "o", Value: bson.D{{Key: "applyOps", Value: bson.A{insertOp("a.d", doc(3))}}}}},
	}}})
	txn := txnEntry(6, 0, 1, []bson.D{insertOp("a.b", doc(4)), deleteOp("a.b", 5)})
	a := NewAssembler()
	units := feed(t, a, plain, txn)
	if len(units) != 2 {
		t.Fatalf("%d units, want 2", len(units))
	}
	checkUnit(t, units[0], 5, 5, true,
		`i a.b {"$numberInt":"1"}`, `u a.b `, `d a.c {"$numberInt":"2"}`, `i a.d {"$numberInt":"3"}`)
	checkUnit(t, units[1], 6, 6, true, `i a.b {"$numberInt":"4"}`, `d a.b {"$numberInt":"5"}`)
	if _, ok := a.OldestBufferedTS(); ok {
		t.Error("something is buffered after complete transactions")
	}
	// The unwrapped ops translate like top-level entries.
	ws, err := Translate(units[0].Ops[1])
	if err != nil || len(ws) != 1 || ws[0].Kind != Update {
		t.Errorf("Translate(inner update) = %v, %v", ws, err)
	}
}

// chain is a three-entry partialTxn chain of transaction 1 at ts 10, 11
// and 12, linked by prevOpTime.
func chain() []bson.D {
	return []bson.D{
		txnEntry(10, 0, 1, []bson.D{insertOp("a.b", doc(1)), insertOp("a.b", doc(2))}, "partialTxn"),
		txnEntry(11, 10, 1, []bson.D{insertOp("a.c", doc(3))}, "partialTxn"),
		txnEntry(12, 11, 1, []bson.D{deleteOp("a.b", 1)}),
	}
}

var chainOps = []string{`i a.b {"$numberInt":"1"}`, `i a.b {"$numberInt":"2"}`, `i a.c {"$numberInt":"3"}`, `d a.b {"$numberInt":"1"}`}

func TestAssemblerPartialTxnChain(t *testing.T) {
	c := chain()
	a := NewAssembler()
	if units := feed(t, a, c[0]); len(units) != 0 {
		t.Fatalf("first partial entry emitted %d units", len(units))
	}
	if ts, ok := a.OldestBufferedTS(); !ok || ts != tsAt(10) {
		t.Errorf("OldestBufferedTS = %v %v, want %v", ts, ok, tsAt(10))
	}
	// Another transaction's chain and plain entries interleave.
	other := txnEntry(11, 0, 2, []bson.D{insertOp("x.y", doc(9))}, "partialTxn")
	units := feed(t, a, other, c[1], with(outer(12, "i", "x.z"), "o", doc(8)))
	if len(units) != 1 || units[0].Ops[0].NS() != "x.z" {
		t.Fatalf("interleaved entries: %v", units)
	}
	if s := a.Status(); s.OpenTxns != 2 || s.Entries != 3 || s.Bytes == 0 {
		t.Errorf("Status = %+v", s)
	}
	c[2] = txnEntry(13, 11, 1, []bson.D{deleteOp("a.b", 1)})
	units = feed(t, a, c[2])
	if len(units) != 1 {
		t.Fatalf("last entry emitted %d units, want 1", len(units))
	}
	checkUnit(t, units[0], 13, 10, true, chainOps...)
	// Transaction 2 is still open and holds the watermark back.
	if ts, ok := a.OldestBufferedTS(); !ok || ts != tsAt(11) {
		t.Errorf("OldestBufferedTS = %v %v, want %v", ts, ok, tsAt(11))
	}
}

// TestAssemblerCheckpointMidChain is DESIGN scenario 5's restart: half the
// chain is read, a checkpoint saves the buffer (through BSON and JSON, as
// it is persisted), a new Assembler recovers it and reads on, from a
// position before the saved entries (they are read again): exactly one
// unit, with every operation, comes out.
func TestAssemblerCheckpointMidChain(t *testing.T) {
	c := chain()
	a := NewAssembler()
	feed(t, a, c[0], c[1])
	state := a.Checkpoint()
	if len(state.Entries) != 2 {
		t.Fatalf("checkpoint holds %d entries, want 2", len(state.Entries))
	}

	for _, codec := range []string{"bson", "json"} {
		t.Run(codec, func(t *testing.T) {
			var saved AssemblerState
			switch codec {
			case "bson":
				if err := bson.Unmarshal(marshal(t, state), &saved); err != nil {
					t.Fatal(err)
				}
			case "json":
				b, err := json.Marshal(state)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &saved); err != nil {
					t.Fatal(err)
				}
			}
			b := NewAssembler()
			if err := b.Recover(saved); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if ts, ok := b.OldestBufferedTS(); !ok || ts != tsAt(10) {
				t.Errorf("recovered OldestBufferedTS = %v %v", ts, ok)
			}
			// Resume from a checkpoint ts before the chain: its first
			// entries are read again, then the rest.
			units := feed(t, b, c[0], c[1], c[2])
			if len(units) != 1 {
				t.Fatalf("%d units after recovery, want 1", len(units))
			}
			checkUnit(t, units[0], 12, 10, true, chainOps...)

			// Resume from the checkpoint ts itself (after c[1]).
			d := NewAssembler()
			if err := d.Recover(saved); err != nil {
				t.Fatal(err)
			}
			if units := feed(t, d, c[2]); len(units) != 1 || len(units[0].Ops) != 4 {
				t.Fatalf("resume after the buffered entries: %v", units)
			}
		})
	}

	// Without the saved state the rest of the chain is refused, not half
	// applied.
	_, _, err := NewAssembler().Add(mustParse(t, c[2]))
	if !errors.Is(err, ErrIncompleteTxn) {
		t.Errorf("chain end without its start: err = %v, want ErrIncompleteTxn", err)
	}
	// The checkpoint does not share memory with the Assembler.
	state.Entries[0][5] ^= 0xff
	if _, ok := a.OldestBufferedTS(); !ok {
		t.Error("assembler lost its buffer")
	}
	if units := feed(t, a, c[2]); len(units) != 1 {
		t.Error("assembler corrupted by a change to its checkpoint")
	}
}

func TestAssemblerPrepared(t *testing.T) {
	t.Run("committed", func(t *testing.T) {
		a := NewAssembler()
		units := feed(t, a,
			txnEntry(20, 0, 3, []bson.D{insertOp("a.b", doc(1))}, "partialTxn"),
			txnEntry(21, 20, 3, []bson.D{insertOp("a.b", doc(2))}, "prepare"),
			with(outer(22, "i", "a.z"), "o", doc(7)),
		)
		if len(units) != 1 {
			t.Fatalf("%d units before the commit, want 1 (the plain insert)", len(units))
		}
		if ts, ok := a.OldestBufferedTS(); !ok || ts != tsAt(20) {
			t.Errorf("OldestBufferedTS = %v %v", ts, ok)
		}
		// A checkpoint while prepared survives a restart too.
		b := NewAssembler()
		if err := b.Recover(a.Checkpoint()); err != nil {
			t.Fatal(err)
		}
		for _, asm := range []*Assembler{a, b} {
			units = feed(t, asm, txnControl(25, 21, 3, "commitTransaction"))
			if len(units) != 1 {
				t.Fatalf("%d units after the commit, want 1", len(units))
			}
			checkUnit(t, units[0], 25, 20, true, `i a.b {"$numberInt":"1"}`, `i a.b {"$numberInt":"2"}`)
			if _, ok := asm.OldestBufferedTS(); ok {
				t.Error("buffer not empty after the commit")
			}
		}
	})
	t.Run("aborted", func(t *testing.T) {
		a := NewAssembler()
		units := feed(t, a,
			txnEntry(30, 0, 4, []bson.D{insertOp("a.b", doc(1))}, "prepare"),
			txnControl(31, 30, 4, "abortTransaction"),
		)
		if len(units) != 0 {
			t.Fatalf("aborted transaction emitted %v", units)
		}
		if s := a.Status(); s.OpenTxns != 0 || s.Entries != 0 {
			t.Errorf("Status after abort = %+v", s)
		}
		// Its commit would now be an error, not a silent apply.
		if _, _, err := a.Add(mustParse(t, txnControl(32, 30, 4, "commitTransaction"))); !errors.Is(err, ErrIncompleteTxn) {
			t.Errorf("commit after abort: %v", err)
		}
	})
}

func TestAssemblerErrors(t *testing.T) {
	tests := []struct {
		name    string
		entries []bson.D
		want    error
	}{
		{"chain end whose start was not read", []bson.D{txnEntry(12, 11, 1, []bson.D{deleteOp("a.b", 1)})}, ErrIncompleteTxn},
		{"partial entry whose predecessor was not read", []bson.D{txnEntry(12, 11, 1, []bson.D{deleteOp("a.b", 1)}, "partialTxn")}, ErrIncompleteTxn},
		{"gap in a chain", []bson.D{
			txnEntry(10, 0, 1, []bson.D{insertOp("a.b", doc(1))}, "partialTxn"),
			txnEntry(12, 11, 1, []bson.D{insertOp("a.b", doc(2))}),
		}, ErrIncompleteTxn},
		{"commit without prepare", []bson.D{txnControl(5, 4, 1, "commitTransaction")}, ErrIncompleteTxn},
		{"commit of an unprepared chain", []bson.D{
			txnEntry(10, 0, 1, []bson.D{insertOp("a.b", doc(1))}, "partialTxn"),
			txnControl(11, 10, 1, "commitTransaction"),
		}, ErrIncompleteTxn},
		{"prepare without a session", []bson.D{with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{}}, {Key: "prepare", Value: true}})}, ErrMalformedEntry},
		{"batched write whose previous entry was not read", []bson.D{with(outer(3, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("a.b", 1)}}},
			"prevOpTime", bson.D{{Key: "ts", Value: tsAt(2)}, {Key: "t", Value: int64(1)}})}, ErrIncompleteTxn},
		{"applyOps after prepare", []bson.D{
			txnEntry(10, 0, 1, []bson.D{insertOp("a.b", doc(1))}, "prepare"),
			txnEntry(11, 10, 1, []bson.D{insertOp("a.b", doc(2))}),
		}, ErrMalformedEntry},
		{"bad inner operation", []bson.D{txnEntry(1, 0, 1, []bson.D{{{Key: "op", Value: "i"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: bson.D{}}}})}, ErrMalformedEntry},
		{"bad inner operation in a partial entry", []bson.D{txnEntry(1, 0, 1, []bson.D{{{Key: "op", Value: "q"}}}, "partialTxn")}, ErrMalformedEntry},
		{"inner operation not a document", []bson.D{with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{1}}})}, ErrMalformedEntry},
		{"commit inside applyOps", []bson.D{with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{
			bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"}, {Key: "o", Value: bson.D{{Key: "commitTransaction", Value: 1}}}},
		}}})}, ErrMalformedEntry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAssembler()
			var err error
			for _, d := range tt.entries {
				if _, _, err = a.Add(mustParse(t, d)); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}

	// Recover refuses what Checkpoint cannot have written.
	a := NewAssembler()
	bad := []AssemblerState{
		{Entries: []bson.Raw{{1, 2, 3}}},
		{Entries: []bson.Raw{marshal(t, with(outer(1, "i", "a.b"), "o", doc(1)))}},
		{Entries: []bson.Raw{marshal(t, txnEntry(1, 0, 1, []bson.D{insertOp("a.b", doc(1))}))}},
	}
	for i, s := range bad {
		if err := a.Recover(s); err == nil {
			t.Errorf("Recover(bad state %d) succeeded", i)
		}
	}
}

// TestShardKeyChange is DESIGN scenario 10's shape: a shard-key change is
// a delete and an insert in one transaction; they come out as one unit
// whose writes delete the old key and upsert the new one.
func TestShardKeyChange(t *testing.T) {
	oldKey := bson.D{{Key: "region", Value: "eu"}, {Key: "_id", Value: 1}}
	newDoc := bson.D{{Key: "_id", Value: 1}, {Key: "region", Value: "us"}, {Key: "n", Value: 5}}
	newKey := bson.D{{Key: "region", Value: "us"}, {Key: "_id", Value: 1}}
	a := NewAssembler()
	units := feed(t, a, txnEntry(40, 0, 5, []bson.D{
		{{Key: "op", Value: "d"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: oldKey}},
		{{Key: "op", Value: "i"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: newDoc}, {Key: "o2", Value: newKey}},
	}))
	if len(units) != 1 || !units[0].Txn || len(units[0].Ops) != 2 {
		t.Fatalf("units = %v", units)
	}
	var keys []string
	for _, op := range units[0].Ops {
		ws, err := Translate(op)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ws[0].Kind.String()+" "+ws[0].DocKey.String())
	}
	want := []string{"delete " + marshal(t, oldKey).String(), "insert " + marshal(t, newKey).String()}
	if !slices.Equal(keys, want) {
		t.Errorf("writes %q, want %q", keys, want)
	}
}
