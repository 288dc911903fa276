package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
)

// TestTTLHeldUntilCutover syncs a TTL collection and a capped one, copy
// then replay, and checks that nothing the sync holds back reaches the
// target before cut-over, and that the cut-over's Restore accounts for
// each option.
//
// What stands in for what: FerretDB v1.24 (source and target) has no TTL
// index and no TTL monitor, so the TTL index arrives as a replayed
// createIndexes entry in mongod's shape, injected into the source's oplog
// and read by the real tailer, followed by a collMod that changes its
// expiry. "Nothing expired" is checked twice: the documents older than
// the expiry are all still on the target, and the target's index carries
// no expireAfterSeconds, which is what a TTL monitor acts on. FerretDB
// has no collMod or convertToCapped either, so Restore reports each
// option with its manual fix here; TestRestoreModel (pkg/engine/holdback)
// checks the commands a MongoDB target receives and its state after.
func TestTTLHeldUntilCutover(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	old := time.Now().Add(-48 * time.Hour)
	var sessions []any
	for i := range 20 {
		sessions = append(sessions, doc("_id", i, "lastSeen", old.Add(time.Duration(i)*time.Minute)))
	}
	insertDocs(t, sc, "app", "sessions", sessions)
	// A capped source collection: copied into an uncapped target one.
	if err := sc.Database("app").CreateCollection(ctx, "events", options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)); err != nil {
		t.Fatal(err)
	}
	insertDocs(t, sc, "app", "events", []any{doc("_id", 1), doc("_id", 2)})

	task := newTask(t, "ttl", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
	})
	opts := engineOpts()
	opts.CheckpointInterval = 100 * time.Millisecond
	e, stop := startEngine(t, task, opts)
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)

	in := newInjector(t, sc)
	in.add("c", "app.$cmd", o(doc("createIndexes", "sessions", "v", 2, "key", doc("lastSeen", 1), "name", "lastSeen_1", "expireAfterSeconds", int32(3600))))
	in.add("c", "app.$cmd", o(doc("collMod", "sessions", "index", doc("name", "lastSeen_1", "expireAfterSeconds", int64(7200)))))
	// A capped collection created during the replay, with live inserts.
	in.add("c", "app.$cmd", o(doc("create", "log", "capped", true, "size", int64(4096), "max", int64(2))))
	for i := range 3 {
		in.add("i", "app.log", o(doc("_id", i)))
	}
	last := in.add("n", "", o(doc("msg", "periodic noop")))
	waitApplied(t, e, last)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("stop: %v", err)
	}

	// Before cut-over: every document is there, no index expires, no
	// collection is capped.
	if got := ids(t, dc, "app.sessions"); len(got) != len(sessions) {
		t.Errorf("app.sessions on the target: %d documents, want all %d (older than the expiry, but the sync holds it back)", len(got), len(sessions))
	}
	if got := ids(t, dc, "app.log"); len(got) != 3 {
		t.Errorf("app.log on the target: %v, want the 3 replayed inserts (max 2 is held back)", got)
	}
	cur, err := dc.Database("app").Collection("sessions").Indexes().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for cur.Next(ctx) {
		if cur.Current.Lookup("name").StringValue() == "lastSeen_1" {
			found = true
			if cur.Current.Lookup("expireAfterSeconds").Type != 0 {
				t.Errorf("target index lastSeen_1 expires during the sync: %s", cur.Current)
			}
		}
	}
	if !found {
		t.Errorf("the replayed index lastSeen_1 is missing on the target")
	}
	for _, coll := range []string{"events", "log"} {
		specs, err := dc.Database("app").ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: coll}})
		if err != nil || len(specs) != 1 {
			t.Fatalf("app.%s on the target: %v, %v", coll, specs, err)
		}
		if specs[0].Options.Lookup("capped").Type != 0 {
			t.Errorf("app.%s is capped on the target during the sync: %s", coll, specs[0].Options)
		}
	}
	held, err := holdback.Pending(ctx, dc, task.Checkpoint.Database, task.Name)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range held {
		got = append(got, h.String())
	}
	want := []string{
		"app.events: capped size 1048576",
		"app.log: capped size 4096 max 2",
		"app.sessions: index lastSeen_1 expireAfterSeconds 7200",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("held back\n got %q\nwant %q", got, want)
	}

	// The run that ends the sync (ferry run --until-caught-up) restores
	// at its end; FerretDB takes none of them back, so the run completes
	// with a warning for each and they stay recorded.
	opts.UntilCaughtUp = true
	if st, err := runEngine(t, task, opts); err != nil || st.Phase != engine.PhaseCompleted {
		t.Fatalf("run until caught up: %s, %v", st.Phase, err)
	}
	if again, err := holdback.Pending(ctx, dc, task.Checkpoint.Database, task.Name); err != nil || len(again) != len(want) {
		t.Errorf("held back after the run: %d (%v), want the %d FerretDB cannot take back", len(again), err, len(want))
	}
	if got := ids(t, dc, "app.sessions"); len(got) != len(sessions) {
		t.Errorf("app.sessions after the run: %d documents, want %d", len(got), len(sessions))
	}

	// The cut-over's call: each is reported with its fix.
	rep, err := holdback.Restore(ctx, dc, task.Checkpoint.Database, task.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Manual) != len(want) || len(rep.Restored) != 0 || len(rep.Gone) != 0 {
		t.Errorf("restore report %+v, want the %d options reported for manual restore", rep, len(want))
	}
	for _, m := range rep.Manual {
		t.Logf("by hand: %s", m.Note)
	}
}
