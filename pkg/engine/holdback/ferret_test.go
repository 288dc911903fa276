package holdback

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// targetIndexes returns a target collection's indexes by name.
func targetIndexes(t *testing.T, c *mongo.Client, ns catalog.Namespace) map[string]bson.Raw {
	t.Helper()
	cur, err := c.Database(ns.DB).Collection(ns.Coll).Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bson.Raw{}
	for cur.Next(context.Background()) {
		out[cur.Current.Lookup("name").StringValue()] = append(bson.Raw(nil), cur.Current...)
	}
	return out
}

func pendingStrings(t *testing.T, c *mongo.Client) []string {
	t.Helper()
	held, err := Pending(context.Background(), c, "mongoferry", "t")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range held {
		out = append(out, h.String())
	}
	return out
}

// TestHolderOnFerretDB creates what the copy and the replay create, with
// the options that change data held back, on a real FerretDB v1.24
// target, then restores them. FerretDB cannot hold a TTL index (it
// refuses expireAfterSeconds), so the TTL index comes in the shape a
// MongoDB source's listIndexes reports it; FerretDB has no TTL monitor
// either, so "nothing expired" is checked on the documents and on the
// index itself (no expireAfterSeconds: nothing a TTL monitor would act
// on). What FerretDB cannot take back at cut-over (collMod,
// convertToCapped) is reported with the manual fix; the model in
// TestRestoreModel covers MongoDB's side.
func TestHolderOnFerretDB(t *testing.T) {
	ctx := context.Background()
	c := testserver.Start(t).MustClient(t)
	h := NewHolder(c, "mongoferry", "t", nil)
	sessions := catalog.Namespace{DB: "app", Coll: "sessions"}
	events := catalog.Namespace{DB: "app", Coll: "events"}
	users := catalog.Namespace{DB: "app", Coll: "users"}
	m, err := catalog.NewMapper(config.Namespaces{}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}

	// The copy: a TTL collection, a capped one, and a unique index whose
	// late build meets the copy's duplicates.
	ttlSpec := raw(t, `{"v": 2, "key": {"lastSeen": 1}, "name": "lastSeen_1", "expireAfterSeconds": 60}`)
	if err := catalog.CreateIndexes(ctx, c, catalog.Collection{Source: sessions, Target: sessions, Indexes: []bson.Raw{ttlSpec}}); err == nil {
		t.Log("FerretDB took a TTL index; the test's premise changed")
	}
	if err := h.CreateCollection(ctx, catalog.Collection{Source: sessions, Target: sessions, Type: "collection"}, m); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-24 * time.Hour)
	if _, err := c.Database("app").Collection("sessions").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "lastSeen", Value: old}},
		bson.D{{Key: "_id", Value: 2}, {Key: "lastSeen", Value: time.Now()}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.CreateIndexes(ctx, catalog.Collection{Source: sessions, Target: sessions, Indexes: []bson.Raw{ttlSpec}}, true); err != nil {
		t.Fatalf("TTL index held back: %v", err)
	}
	if ix := targetIndexes(t, c, sessions)["lastSeen_1"]; ix == nil || ix.Lookup("expireAfterSeconds").Type != 0 {
		t.Errorf("target index lastSeen_1 during the sync: %s, want a plain index on lastSeen", ix)
	}

	capOpts := raw(t, `{"capped": true, "size": 4096, "max": 2}`)
	if err := h.CreateCollection(ctx, catalog.Collection{Source: events, Target: events, Type: "collection", Options: capOpts}, m); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Database("app").Collection("events").InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}}); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Database("app").Collection("users").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "a"}, {Key: "email", Value: "x@example.com"}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "email", Value: "x@example.com"}}, // read before a's change reached the copy
	}); err != nil {
		t.Fatal(err)
	}
	uniqueSpec := raw(t, `{"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true}`)
	if err := h.CreateIndexes(ctx, catalog.Collection{Source: users, Target: users, Indexes: []bson.Raw{uniqueSpec}}, true); err != nil {
		t.Fatalf("unique index over the copy's duplicates: %v", err)
	}

	// The replay: the source changes the expiry (collMod), which changes
	// the record, not the target.
	rest, err := h.CollMod(ctx, sessions, raw(t, `{"index": {"name": "lastSeen_1", "expireAfterSeconds": 120}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(bsonElements(rest)) != 0 {
		t.Errorf("collMod left for the target: %s, want nothing", rest)
	}
	want := []string{
		"app.events: capped size 4096 max 2",
		"app.sessions: index lastSeen_1 expireAfterSeconds 120",
		"app.users: index email_1 unique",
	}
	if got := pendingStrings(t, c); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("pending\n got %q\nwant %q", got, want)
	}
	for _, ns := range []catalog.Namespace{sessions, events} {
		if n, err := c.Database(ns.DB).Collection(ns.Coll).CountDocuments(ctx, bson.D{}); err != nil || n < 2 {
			t.Errorf("%s during the sync: %d documents (%v); nothing may expire or be evicted", ns, n, err)
		}
	}

	// The replay reaches the source's state: b's email changed.
	if _, err := c.Database("app").Collection("users").UpdateOne(ctx, bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "email", Value: "y@example.com"}}}}); err != nil {
		t.Fatal(err)
	}

	// Cut-over, twice (a restart midway runs it again).
	for run := 1; run <= 2; run++ {
		rep, err := Restore(ctx, c, "mongoferry", "t")
		if err != nil {
			t.Fatalf("restore run %d: %v", run, err)
		}
		if run == 1 && (len(rep.Restored) != 1 || rep.Restored[0].Kind != KindUnique) {
			t.Errorf("run 1 restored %v, want the unique index", rep.Restored)
		}
		if len(rep.Manual) != 2 {
			t.Fatalf("run %d: manual %+v, want the TTL index and the capped collection", run, rep.Manual)
		}
		for _, o := range rep.Manual {
			if !strings.Contains(o.Note, o.Held.NS) || !strings.Contains(o.Note, "db.runCommand(") {
				t.Errorf("note %q names neither the collection nor the fix", o.Note)
			}
			t.Logf("by hand: %s", o.Note)
		}
	}
	if ix := targetIndexes(t, c, users)["email_1"]; ix == nil || !ix.Lookup("unique").Boolean() {
		t.Errorf("email_1 after cut-over: %s, want unique", ix)
	}
	if _, err := c.Database("app").Collection("users").InsertOne(ctx, bson.D{{Key: "_id", Value: "c"}, {Key: "email", Value: "x@example.com"}}); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("a duplicate email after cut-over: %v, want a duplicate key error", err)
	}
	if got := pendingStrings(t, c); len(got) != 2 {
		t.Errorf("pending after cut-over on FerretDB: %q, want the TTL index and the capped collection", got)
	}

	// Replayed DDL keeps the records in step: a rename moves them, a
	// dropIndexes and a drop forget them.
	renamed := catalog.Namespace{DB: "app", Coll: "sessions2"}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "renameCollection", Value: "app.sessions"}, {Key: "to", Value: "app.sessions2"}}).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // again, as after a restart
		if err := h.Renamed(ctx, sessions, renamed); err != nil {
			t.Fatal(err)
		}
	}
	if got := pendingStrings(t, c); strings.Join(got, "\n") != "app.events: capped size 4096 max 2\napp.sessions2: index lastSeen_1 expireAfterSeconds 120" {
		t.Errorf("after a rename: %q", got)
	}
	if err := h.DroppedIndexes(ctx, renamed, []string{"lastSeen_1"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Dropped(ctx, events); err != nil {
		t.Fatal(err)
	}
	if got := pendingStrings(t, c); len(got) != 0 {
		t.Errorf("after dropIndexes and drop: %q, want nothing", got)
	}
}

func bsonElements(doc bson.Raw) []bson.RawElement {
	elems, _ := doc.Elements()
	return elems
}

// TestCollModOfADroppedIndex: a collMod giving an index an expiry, applied
// again after a restart from a checkpoint taken before a later
// dropIndexes, finds neither a record nor the index on the target (a real
// FerretDB). The error says IndexNotFound (ErrIndexNotFound), which replay
// accepts as mongod's oplog application does; before, it carried no code
// and stopped replay on every restart.
func TestCollModOfADroppedIndex(t *testing.T) {
	ctx := context.Background()
	c := testserver.Start(t).MustClient(t)
	h := NewHolder(c, "mongoferry", "t", nil)
	sessions := catalog.Namespace{DB: "app", Coll: "sessions"}
	if err := c.Database("app").CreateCollection(ctx, "sessions"); err != nil {
		t.Fatal(err)
	}
	ttlSpec := raw(t, `{"v": 2, "key": {"lastSeen": 1}, "name": "lastSeen_1", "expireAfterSeconds": 60}`)
	if err := h.CreateIndexes(ctx, catalog.Collection{Source: sessions, Target: sessions, Indexes: []bson.Raw{ttlSpec}}, true); err != nil {
		t.Fatal(err)
	}
	if err := h.DroppedIndexes(ctx, sessions, []string{"lastSeen_1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Database("app").Collection("sessions").Indexes().DropOne(ctx, "lastSeen_1"); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []string{
		`{"index": {"name": "lastSeen_1", "expireAfterSeconds": 120}}`,
		`{"index": {"keyPattern": {"lastSeen": 1}, "expireAfterSeconds": 120}}`,
	} {
		_, err := h.CollMod(ctx, sessions, raw(t, mod))
		if !errors.Is(err, ErrIndexNotFound) {
			t.Errorf("collMod %s of a dropped index: %v, want ErrIndexNotFound", mod, err)
		}
	}
	if got := pendingStrings(t, c); len(got) != 0 {
		t.Errorf("held after the dropped index's collMod: %q, want nothing", got)
	}
}
