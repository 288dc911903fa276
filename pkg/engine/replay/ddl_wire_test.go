package replay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// mongodViews answers DDL as MongoDB does for a database holding views
// (FerretDB has none): create and collMod succeed; listIndexes of a
// collection lists its _id index, and of a view fails with
// CommandNotSupportedOnView (166), as the server's
// jstests/core/views/views_all_commands.js expects.
type mongodViews struct {
	mu    sync.Mutex
	views map[string]bool // "db.coll"
	asked []string        // the commands answered, "name db.coll"
}

func (m *mongodViews) reply(db string, body bson.Raw) bson.Raw {
	elems, err := body.Elements()
	if err != nil || len(elems) == 0 {
		return nil
	}
	name := elems[0].Key()
	coll, _ := elems[0].Value().StringValueOK()
	ns := db + "." + coll
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = append(m.asked, name+" "+ns)
	must := func(d bson.D) bson.Raw {
		b, _ := bson.Marshal(d)
		return b
	}
	switch name {
	case "create":
		if body.Lookup("viewOn").Type != 0 {
			m.views[ns] = true
		}
		return must(bson.D{{Key: "ok", Value: 1.0}})
	case "collMod":
		return must(bson.D{{Key: "ok", Value: 1.0}})
	case "listIndexes":
		if m.views[ns] {
			return must(bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "Namespace " + ns + " is a view, not a collection"},
				{Key: "code", Value: int32(166)}, {Key: "codeName", Value: "CommandNotSupportedOnView"}})
		}
		idx := bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "name", Value: "_id_"}}
		return must(bson.D{{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "ns", Value: ns},
			{Key: "firstBatch", Value: bson.A{idx}}}}, {Key: "ok", Value: 1.0}})
	}
	return nil
}

// TestViewDDLOnMongoDBTarget: a view created on the source, a write to
// the collection it reads, the view changed by collMod and another write
// replay on a target that answers listIndexes of a view with code 166:
// nothing stops, both writes land and the checkpoint reaches the last
// entry.
func TestViewDDLOnMongoDBTarget(t *testing.T) {
	m := &mongodViews{views: map[string]bool{}}
	srv, err := wiresim.Start(wiresim.Options{Command: m.reply})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })

	pos := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 100, I: i} }
	mustRaw := func(t *testing.T, d bson.D) bson.Raw {
		t.Helper()
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cmd := func(i uint32, o bson.D) bson.Raw {
		return mustRaw(t, bson.D{{Key: "ts", Value: pos(i)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"}, {Key: "o", Value: o}})
	}
	insert := func(i uint32, id int32) bson.Raw {
		return mustRaw(t, bson.D{{Key: "ts", Value: pos(i)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "i"}, {Key: "ns", Value: "shop.orders"},
			{Key: "o", Value: bson.D{{Key: "_id", Value: id}}}})
	}
	entries := []bson.Raw{
		cmd(1, bson.D{{Key: "create", Value: "open"}, {Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: bson.A{}}}),
		insert(2, 1),
		cmd(3, bson.D{{Key: "collMod", Value: "open"}, {Key: "viewOn", Value: "orders"},
			{Key: "pipeline", Value: bson.A{bson.D{{Key: "$match", Value: bson.D{{Key: "state", Value: "open"}}}}}}}),
		insert(4, 2),
	}
	spec := config.Spec{Threads: config.Threads{Writers: 2}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	r := replay.New(replay.Options{Task: "views", Spec: &spec, Reader: source.NewScripted(pos(0), entries...), Target: client, Mapper: mapper, From: pos(0),
		CheckpointInterval: time.Hour, SaveApplied: func(context.Context, bson.Timestamp) error { return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	werr := srv.WaitWrites(wctx, "shop", 2)
	for deadline := time.Now().Add(5 * time.Second); r.Checkpoint() != pos(4) && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatalf("replay stopped: %v", err)
	} else if err != nil && err != context.Canceled {
		t.Fatalf("replay stopped: %v (the target answered: %v)", err, m.asked)
	}
	if werr != nil {
		t.Fatalf("the two inserts did not reach the target: %v (it answered: %v)", werr, m.asked)
	}
	if cp := r.Checkpoint(); cp != pos(4) {
		t.Fatalf("checkpoint %v, want %v", cp, pos(4))
	}
}

// TestCheckpointWaitsForOpsAfterDDLInOneEntry: one applyOps entry (a
// transaction) creates an index and then inserts a document. The DDL
// drains the writers and is applied first; the checkpoint must not reach
// the entry's position until the insert after it is acknowledged too: a
// run stopped in between would resume after the entry and lose the
// insert.
func TestCheckpointWaitsForOpsAfterDDLInOneEntry(t *testing.T) {
	m := &mongodViews{views: map[string]bool{}}
	reply := func(db string, body bson.Raw) bson.Raw {
		if elems, _ := body.Elements(); len(elems) > 0 && elems[0].Key() == "createIndexes" {
			b, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}})
			return b
		}
		return m.reply(db, body)
	}
	const delay = 400 * time.Millisecond
	srv, err := wiresim.Start(wiresim.Options{Command: reply, WriteDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })

	at := bson.Timestamp{T: 100, I: 1}
	op := func(d bson.D) bson.D { return d }
	entry, err := bson.Marshal(bson.D{{Key: "ts", Value: at}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "applyOps", Value: bson.A{
			op(bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"}, {Key: "o", Value: bson.D{{Key: "createIndexes", Value: "orders"},
				{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "sku", Value: int32(1)}}}, {Key: "name", Value: "sku_1"}}}}),
			op(bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "shop.orders"}, {Key: "o", Value: bson.D{{Key: "_id", Value: int32(1)}, {Key: "sku", Value: "a"}}}}),
		}}}},
		{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}}}, {Key: "txnNumber", Value: int64(1)},
		{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := config.Spec{Threads: config.Threads{Writers: 2}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	from := bson.Timestamp{T: 100}
	r := replay.New(replay.Options{Task: "ddl", Spec: &spec, Reader: source.NewScripted(from, entry), Target: client, Mapper: mapper, From: from,
		CheckpointInterval: time.Hour, SaveApplied: func(context.Context, bson.Timestamp) error { return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		cp := r.Checkpoint()
		inserted := srv.Stats().ByDB["shop"].Inserts
		if cp == at && inserted == 0 {
			t.Fatalf("checkpoint at the entry %v while its insert is not acknowledged (the target answered %v)", at, m.asked)
		}
		if cp == at {
			break
		}
	}
	if cp := r.Checkpoint(); cp != at {
		t.Fatalf("checkpoint %v once everything is applied, want %v", cp, at)
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Fatal(err)
	}
}
