package replaybench

import (
	"context"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestGenerateAndRun checks that every generated entry parses and
// translates to exactly one write, that the reader's copies carry their
// new ts, and that a run over more than one cycle of the pool delivers
// every write and checkpoints the last entry.
func TestGenerateAndRun(t *testing.T) {
	for _, shape := range Shapes {
		t.Run(string(shape), func(t *testing.T) {
			in, err := Generate(shape, 3000, Mix{}, 7)
			if err != nil {
				t.Fatal(err)
			}
			c := in.Counts(3000)
			if c.Writes() != 3000 || c.Updates == 0 || c.Deletes == 0 {
				t.Fatalf("mix: %+v", c)
			}
			if c2 := in.Counts(7500); c2.Inserts != 2*c.Inserts+in.Counts(1500).Inserts || c2.Writes() != 7500 {
				t.Fatalf("counts of 7500: %+v, of 3000: %+v", c2, c)
			}
			r := NewReader(in, 7500, 1000)
			var k int64
			for k < 7500 {
				batch, err := r.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, raw := range batch {
					e, err := oplog.Parse(raw)
					if err != nil {
						t.Fatalf("entry %d: %v", k, err)
					}
					if e.TS() != in.TS(k) {
						t.Fatalf("entry %d: ts %v, want %v", k, e.TS(), in.TS(k))
					}
					ws, err := oplog.Translate(e)
					if err != nil || len(ws) != 1 {
						t.Fatalf("entry %d (%s): %d writes, %v", k, e, len(ws), err)
					}
					k++
				}
			}
			if _, err := Run(context.Background(), in, Config{Ops: 7500, Writers: 3, BatchSize: 50}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInsertManyShape: the 8.0 insertMany shape is whole insertManys of
// 500 inserts in batches of 64, each batch a unit of its own, and a run
// delivers every insert (Run checks the sink's count).
func TestInsertManyShape(t *testing.T) {
	in, err := Generate(ShapeInsertMany, 64*8*3, Mix{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Entries)%8 != 0 {
		t.Fatalf("%d entries: not whole insertManys of 8 batches", len(in.Entries))
	}
	if c := in.Counts(16); c.Inserts != 1000 || c.Updates+c.Deletes != 0 {
		t.Fatalf("two insertManys: %+v, want 1000 inserts", c)
	}
	a := oplog.NewAssembler()
	for k, raw := range in.Entries[:8] {
		e, err := oplog.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u, ok, err := a.Add(e)
		if err != nil || !ok || u.FirstTS != u.TS {
			t.Fatalf("batch %d: unit %v ok %v err %v: want a unit of its own", k, u.TS, ok, err)
		}
	}
	if _, err := Run(context.Background(), in, Config{Ops: 40, Writers: 3, BatchSize: 50}); err != nil {
		t.Fatal(err)
	}
}

// TestRunShards replays a pool as three shards with migrations: every
// write arrives, writes are held after the migrations, and each subtask's
// checkpoint reaches its shard's last entry.
func TestRunShards(t *testing.T) {
	in, err := Generate(ShapeDDT, 3000, Mix{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunShards(context.Background(), in, ShardConfig{Config: Config{Ops: 7500, Writers: 3, BatchSize: 50}, Shards: 3, MigrateEvery: 500, Publish: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Migrations != 14 || res.HeldWrites == 0 {
		t.Errorf("%d migrations read, %d writes held; want 14 and some", res.Migrations, res.HeldWrites)
	}
}

// TestGenerateKeyedCarriesTheDocumentKey: with a shard key not led by
// _id, every entry carries the document key {sk, _id} where a sharded
// source logs it (o2 of inserts and updates, o of deletes), each document
// has the sk of its key, and a sharded run holds nothing (no migration):
// writes filtered on their whole document key wait only on a conflict.
func TestGenerateKeyedCarriesTheDocumentKey(t *testing.T) {
	in, err := GenerateKeyed(ShapeDDT, 2000, Mix{}, 3, "sk")
	if err != nil {
		t.Fatal(err)
	}
	for i, raw := range in.Entries {
		e, err := oplog.Parse(raw)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		key, err := e.DocKey()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		elems, err := key.Elements()
		if err != nil || len(elems) != 2 || elems[0].Key() != "sk" || elems[1].Key() != "_id" {
			t.Fatalf("entry %d (%s): document key %s, want {sk, _id}", i, e, key)
		}
		if e.Kind() == oplog.Insert {
			if sk, id := e.O().Lookup("sk"), e.O().Lookup("_id"); !sk.Equal(elems[0].Value()) || !id.Equal(elems[1].Value()) {
				t.Fatalf("entry %d: document %s does not match its key %s", i, e.O(), key)
			}
		}
	}
	r, err := RunShards(context.Background(), in, ShardConfig{Config: Config{Ops: 300, Writers: 2, BatchSize: 50},
		Shards: 2, MigrateEvery: -1, Publish: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.HeldWrites != 0 {
		t.Fatalf("%d writes held, want none", r.HeldWrites)
	}
}

// TestRunShardsRehome: with 5% of the entries moving a document to
// another shard (an earlier document with its _id inserted and deleted
// on its home shard first), every write reaches the sink, once, and every
// subtask's checkpoint reaches its shard's end.
func TestRunShardsRehome(t *testing.T) {
	in, err := GenerateKeyed(ShapeDDT, 2000, Mix{}, 3, "sk")
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunShards(context.Background(), in, ShardConfig{Config: Config{Ops: 3000, Writers: 2, BatchSize: 50},
		Shards: 3, MigrateEvery: -1, Publish: 10 * time.Millisecond, Rehome: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if r.Moves < 100 || r.HeldWrites != 0 {
		t.Fatalf("%d documents moved, %d writes held; want about 150 and none", r.Moves, r.HeldWrites)
	}
	if _, err := RunShards(context.Background(), in, ShardConfig{Config: Config{Ops: 10}, Shards: 1, Rehome: 0.05}); err == nil {
		t.Fatal("a move with one shard: no error")
	}
}
