package replay

import (
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
	insert := func(id int32) bson.D {
		return bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "db.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: id}}}}
	}
	entries := []bson.Raw{
		entry(t, ts(1), prepareOp(1, insert(1))),
		entry(t, ts(2), bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}),
		entry(t, ts(3), insert(2)),
		entry(t, ts(4), commitOp(1, ts(4), ts(1))),
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
	entries := []bson.Raw{
		entry(t, ts(1), prepareOp(2, bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "db.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: 1}}}})),
		entry(t, ts(2), abortOp(2, ts(1))),
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
