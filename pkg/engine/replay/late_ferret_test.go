package replay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestLateEntryNotLostAcrossRestart reproduces a delete lost after a
// SIGKILL (TestReplayKilledRepeatedly): FerretDB gives an entry its ts
// before it writes it to the oplog, so under load an entry can become
// visible after later ones were read and applied (a hole). A checkpoint
// saved past the hole, then a crash before the entry shows, used to make
// the restarted run step over it for good: a tailer started after a
// position hands out nothing at or below it.
//
// The source is a real FerretDB whose oplog entries are written here
// with chosen ts values (DESIGN §7): an insert of x and an insert of y
// are visible first, then the run stops (its last checkpoint saved, as a
// periodic save before a kill leaves it), then the delete of x between
// them shows up, a few seconds late. The run started from the saved
// checkpoint must delete x.
func TestLateEntryNotLostAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs FerretDB servers (make ferretdb); skipped with -short")
	}
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()

	// Older than the tailer's settle time (2s), so handed out at once,
	// and well within its look-back window (10s).
	at := uint32(time.Now().Add(-3 * time.Second).Unix())
	pos := func(i uint32) bson.Timestamp { return bson.Timestamp{T: at, I: i} }
	entry := func(i uint32, op string, o bson.D) bson.D {
		return bson.D{{Key: "ts", Value: pos(i)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op},
			{Key: "ns", Value: "shop.orders"}, {Key: "o", Value: o}}
	}
	oplogColl := sc.Database("local").Collection("oplog.rs")
	if _, err := oplogColl.InsertMany(ctx, []any{
		entry(1, "i", bson.D{{Key: "_id", Value: "x"}, {Key: "v", Value: int32(1)}}),
		entry(3, "i", bson.D{{Key: "_id", Value: "y"}, {Key: "v", Value: int32(1)}}),
	}); err != nil {
		t.Fatal(err)
	}

	spec := config.Spec{Threads: config.Threads{Writers: 2}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var killed bool
	saved := bson.Timestamp{T: at - 1}
	run := func(stopWhen func() bool) {
		t.Helper()
		mu.Lock()
		killed = false
		from := saved
		mu.Unlock()
		tailer := source.NewTailer(sc, from)
		tailer.Settle = 2 * time.Second
		r := New(Options{Task: "late", Spec: &spec, Reader: tailer, Source: sc, Target: dc, Mapper: mapper, From: from,
			CheckpointInterval: 100 * time.Millisecond,
			SaveApplied: func(_ context.Context, ts bson.Timestamp) error {
				mu.Lock()
				if !killed { // a killed process saves nothing more
					saved = ts
				}
				mu.Unlock()
				return nil
			}})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for !stopWhen() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a periodic checkpoint after the last write
		mu.Lock()
		killed = true // as SIGKILL: no save on the way out
		mu.Unlock()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("replay: %v", err)
		}
	}
	has := func(id string) bool {
		err := dc.Database("shop").Collection("orders").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err()
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			t.Fatal(err)
		}
		return err == nil
	}

	run(func() bool { return has("x") && has("y") })
	if !has("x") || !has("y") {
		t.Fatal("the first run did not apply the two inserts")
	}
	mu.Lock()
	t.Logf("saved after the first run: %v (the inserts are at %v and %v)", saved, pos(1), pos(3))
	mu.Unlock()

	// The hole fills: the delete of x, between the two inserts, shows up.
	if _, err := oplogColl.InsertOne(ctx, entry(2, "d", bson.D{{Key: "_id", Value: "x"}})); err != nil {
		t.Fatal(err)
	}
	run(func() bool { return !has("x") })
	if has("x") {
		t.Fatalf("the target keeps x, which the delete at %v removed on the source: the restart stepped over the late entry", pos(2))
	}
	if !has("y") {
		t.Fatal("the target lost y")
	}
}
