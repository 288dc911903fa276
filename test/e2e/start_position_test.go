package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// emptyOplogSource starts a source holding n documents in app.c whose
// oplog (of oplogBytes) is created after they are loaded: it is empty
// when a task starts, as on a deployment that has taken no write since
// its oplog began, or a FerretDB (which writes no periodic no-ops).
func emptyOplogSource(t *testing.T, n int, oplogBytes int64) (*testserver.Server, *mongo.Client) {
	t.Helper()
	src := testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc := src.MustClient(t)
	docs := make([]any, n)
	for i := range docs {
		docs[i] = doc("_id", int32(i), "v", int32(0), "pad", strings.Repeat("p", 100))
	}
	insertDocs(t, sc, "app", "c", docs)
	if err := src.CreateOplog(context.Background(), oplogBytes); err != nil {
		t.Fatal(err)
	}
	return src, sc
}

// oldestTS returns the ts of the oldest entry of a server's oplog.
func oldestTS(t *testing.T, c *mongo.Client) bson.Timestamp {
	t.Helper()
	raw, err := c.Database("local").Collection("oplog.rs").FindOne(context.Background(), bson.D{}).Raw()
	if err != nil {
		t.Fatalf("oldest oplog entry: %v", err)
	}
	ts, i, _ := raw.Lookup("ts").TimestampOK()
	return bson.Timestamp{T: ts, I: i}
}

// TestStartOnEmptyOplog: a task that starts while the source's oplog is
// empty records the source's current time as its start position (not ts
// 0), and writes made during the copy are replayed from it: the oplog's
// first entries come after the start, which is no lost window. The
// copy waits for FerretDB's capped-collection cleanup (every second here)
// to run over the oplog meanwhile.
func TestStartOnEmptyOplog(t *testing.T) {
	src, sc := emptyOplogSource(t, 3000, 1<<20)
	dst := testserver.Start(t)
	task := newTask(t, "empty-start", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyHash
		t.Cache.BatchSize = 300
	})
	coll := sc.Database("app").Collection("c")
	var once sync.Once
	opts := engineOpts()
	opts.UntilCaughtUp = true
	opts.CopyHook = func(int64) {
		once.Do(func() {
			ctx := context.Background()
			for i := range 60 {
				_, _ = coll.InsertOne(ctx, doc("_id", int32(10000+i), "v", int32(1)))
				_, _ = coll.UpdateOne(ctx, doc("_id", int32(i)), doc("$unset", doc("pad", ""), "$set", doc("v", int32(2))))
				_, _ = coll.DeleteOne(ctx, doc("_id", int32(2000+i)))
			}
			time.Sleep(2500 * time.Millisecond) // the oplog's cleanup runs
		})
	}
	before := time.Now().Add(-time.Minute)
	st, err := runEngine(t, task, opts)
	if err != nil {
		t.Fatalf("run: %v (status %+v)", err, st)
	}
	if st.Verify == nil || !st.Verify.OK {
		t.Errorf("verification: %+v, want OK", st.Verify)
	}
	assertSameDocs(t, sc, "app.c", dst.MustClient(t), "app.c")
	var rec checkpoint.TaskRecord
	if err := dst.MustClient(t).Database("mongoferry").Collection("tasks").FindOne(context.Background(), doc("_id", "empty-start")).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if !rec.StartOnEmptyOplog || time.Unix(int64(rec.StartTS.T), 0).Before(before) {
		t.Errorf("start position %v (on an empty oplog: %v), want the source's time when the task started", rec.StartTS, rec.StartOnEmptyOplog)
	}
}

// TestStartOnEmptyOplogWindowLost: when the writes made during the copy
// overflow the source's capped oplog, the entries right after the start
// are gone, and the task stops with OplogWindowLost instead of replaying
// what is left.
func TestStartOnEmptyOplogWindowLost(t *testing.T) {
	src, sc := emptyOplogSource(t, 2000, 256<<10)
	dst := testserver.Start(t)
	task := newTask(t, "empty-lost", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cache.BatchSize = 300
	})
	coll := sc.Database("app").Collection("c")
	var once sync.Once
	opts := engineOpts()
	opts.CopyHook = func(int64) {
		once.Do(func() {
			ctx := context.Background()
			if _, err := coll.InsertOne(ctx, doc("_id", "first", "v", int32(1))); err != nil {
				t.Error(err)
				return
			}
			first := oldestTS(t, sc)
			big := make([]any, 0, 100)
			for i := range 1000 {
				big = append(big, doc("_id", fmt.Sprintf("big%04d", i), "pad", strings.Repeat("b", 1000)))
				if len(big) == cap(big) {
					if _, err := coll.InsertMany(ctx, big); err != nil {
						t.Error(err)
						return
					}
					big = big[:0]
				}
			}
			deadline := time.Now().Add(time.Minute)
			for oldestTS(t, sc).Compare(first) <= 0 {
				if time.Now().After(deadline) {
					t.Error("the source's oplog was not trimmed within a minute")
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
	_, err := runEngine(t, task, opts)
	if !errors.Is(err, source.ErrOplogWindowLost) {
		t.Fatalf("run: %v, want OplogWindowLost", err)
	}
	if !strings.Contains(err.Error(), "was empty when the task started") {
		t.Errorf("the message does not say why: %v", err)
	}
}
