package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestCollModOfADroppedTTLIndexAfterRestart: a collMod that changes a TTL
// index's expiry, followed by a dropIndexes of that index, both applied
// after the last checkpoint. On restart replay applies the collMod again
// and the target (a real FerretDB) has neither the index nor its held
// record. mongod's oplog application accepts IndexNotFound from a collMod
// as applied (repl/oplog.cpp); replay does too, applies the dropIndexes
// again and goes on. Before, the collMod stopped replay on every restart.
//
// What stands in: the first run applies the createIndexes and stops with
// its checkpoint there; what the collMod and the dropIndexes left on the
// target (no index, no record) is then made directly, as if applied just
// before the restart. The entries come through a scripted reader in
// mongod's shapes (FerretDB logs none of them).
func TestCollModOfADroppedTTLIndexAfterRestart(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	dc := dst.MustClient(t)
	insertDocs(t, dc, "app", "sessions", []any{doc("_id", 1, "lastSeen", time.Now())})

	base := uint32(time.Now().Unix()) + 1000
	entry := func(i uint32, op, ns string, o bson.D) bson.Raw {
		raw, err := bson.Marshal(doc("ts", bson.Timestamp{T: base, I: i}, "t", int64(1), "op", op, "ns", ns, "o", o))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	create := entry(1, "c", "app.$cmd", doc("createIndexes", "sessions", "v", int32(2), "key", doc("lastSeen", int32(1)),
		"name", "lastSeen_1", "expireAfterSeconds", int32(3600)))
	collMod := entry(2, "c", "app.$cmd", doc("collMod", "sessions", "index", doc("name", "lastSeen_1", "expireAfterSeconds", int64(7200))))
	drop := entry(3, "c", "app.$cmd", doc("dropIndexes", "sessions", "index", "lastSeen_1"))
	insert := entry(4, "i", "app.sessions", doc("_id", 2, "lastSeen", time.Now()))

	task := newTask(t, "collmod", src, dst, func(t *config.Task) {
		t.Mode = config.ModeIncremental
		t.Verify.Mode = config.VerifyNone
	})
	run := func(entries ...bson.Raw) {
		t.Helper()
		reader := source.NewScripted(bson.Timestamp{T: base}, entries...)
		opts := engineOpts()
		opts.CheckpointInterval = 50 * time.Millisecond
		opts.Reader = func(bson.Timestamp) source.OplogReader { return reader }
		e, stop := startEngine(t, task, opts)
		last, _ := reader.Newest(ctx)
		waitApplied(t, e, last)
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("stop: %v", err)
		}
	}
	run(create)

	// The collMod and the dropIndexes were applied after the checkpoint.
	sessions := catalog.Namespace{DB: "app", Coll: "sessions"}
	h := holdback.NewHolder(dc, task.Checkpoint.Database, task.Name, nil)
	if err := h.DroppedIndexes(ctx, sessions, []string{"lastSeen_1"}); err != nil {
		t.Fatal(err)
	}
	if err := dc.Database("app").Collection("sessions").Indexes().DropOne(ctx, "lastSeen_1"); err != nil {
		t.Fatal(err)
	}

	// The restart applies them again, then goes on.
	run(collMod, drop, insert)
	if got := ids(t, dc, "app.sessions"); len(got) != 2 {
		t.Errorf("app.sessions on the target: %v, want _id 1 and the insert after the collMod", got)
	}
	held, err := holdback.Pending(ctx, dc, task.Checkpoint.Database, task.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Errorf("held back after the index was dropped: %v, want nothing", held)
	}
}
