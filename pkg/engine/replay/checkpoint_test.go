package replay

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckpointStaysBelowAppliedTransaction: a prepared transaction's
// commit completes it while an earlier write is still being applied, and a
// no-op between its prepare and the write is done. While the replayer
// waits to apply the transaction, the checkpoint must stay below the
// prepare entry: a restart from a checkpoint past it would read the commit
// without its prepare.
func TestCheckpointStaysBelowAppliedTransaction(t *testing.T) {
	ts := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 100, I: i} }
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{1}, 16)}}}
	entries := []bson.Raw{
		mustRaw(t, bson.D{{Key: "ts", Value: ts(1)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "applyOps", Value: bson.A{bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "db.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: 1}}}}}}, {Key: "prepare", Value: true}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(1)}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}}),
		mustRaw(t, bson.D{{Key: "ts", Value: ts(2)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}),
		mustRaw(t, bson.D{{Key: "ts", Value: ts(3)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "i"}, {Key: "ns", Value: "db.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: 2}}}}),
		mustRaw(t, bson.D{{Key: "ts", Value: ts(4)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "commitTransaction", Value: 1}, {Key: "commitTimestamp", Value: ts(4)}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(1)}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: ts(1)}, {Key: "t", Value: int64(1)}}}}),
	}
	spec := config.Spec{Threads: config.Threads{Writers: 2}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	blocked, release := make(chan struct{}), make(chan struct{})
	r := New(Options{Task: "t", Spec: &spec, Reader: source.NewScripted(ts(0), entries...), Mapper: mapper, From: ts(0),
		CheckpointInterval: time.Hour,
		Apply: func(_ context.Context, _ catalog.Namespace, models []mongo.WriteModel) error {
			if d := models[0].(*mongo.InsertOneModel).Document.(bson.Raw); d.Lookup("_id").Int32() == 2 {
				close(blocked)
				<-release
			}
			return nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-blocked
	// The dispatcher reads the commit and waits for the write of ts 3.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cp := r.Checkpoint(); !cp.Before(ts(1)) {
			t.Fatalf("checkpoint %v while the transaction prepared at %v waits to be applied", cp, ts(1))
		}
		if r.Status().ReadTS == ts(4) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	if cp := r.Checkpoint(); !cp.Before(ts(1)) {
		t.Fatalf("checkpoint %v while the transaction prepared at %v waits to be applied", cp, ts(1))
	}
	close(release)
	for deadline := time.Now().Add(2 * time.Second); r.Checkpoint() != ts(4) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	if cp := r.Checkpoint(); cp != ts(4) {
		t.Errorf("checkpoint %v once everything is applied, want %v", cp, ts(4))
	}
	cancel()
	<-done
}

// TestAbortedTransactionMovesCheckpoint: a prepared transaction aborted
// changes nothing on the target, and the checkpoint moves past its abort
// entry, so an idle source shows no lag once it is read.
func TestAbortedTransactionMovesCheckpoint(t *testing.T) {
	ts := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 100, I: i} }
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{2}, 16)}}}
	entries := []bson.Raw{
		mustRaw(t, bson.D{{Key: "ts", Value: ts(1)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "applyOps", Value: bson.A{bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "db.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: 1}}}}}}, {Key: "prepare", Value: true}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(1)}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}}),
		mustRaw(t, bson.D{{Key: "ts", Value: ts(2)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "abortTransaction", Value: 1}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(1)}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: ts(1)}, {Key: "t", Value: int64(1)}}}}),
	}
	spec := config.Spec{Threads: config.Threads{Writers: 2}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	r := New(Options{Task: "t", Spec: &spec, Reader: source.NewScripted(ts(0), entries...), Mapper: mapper, From: ts(0),
		CheckpointInterval: time.Hour,
		Apply: func(context.Context, catalog.Namespace, []mongo.WriteModel) error {
			writes++
			return nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); r.Checkpoint() != ts(2) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	got := r.Checkpoint()
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatal(err)
	}
	if got != ts(2) {
		t.Fatalf("checkpoint %v after the abort entry, want %v", got, ts(2))
	}
	if writes != 0 {
		t.Fatalf("%d writes applied from an aborted transaction", writes)
	}
}
