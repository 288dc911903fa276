package wiresim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// These tests talk to the fixture through the real Go driver and the
// engine's own connection, probe and tailer code: the fixture stands in
// for a MongoDB replica-set primary whose oplog is generated and whose
// writes are acknowledged without being stored.

func startServer(t *testing.T, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func connect(t *testing.T, s *Server) *mongo.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := conn.Open(ctx, "source", config.Endpoint{URI: s.URI()}, conn.Options{AppName: "wiresim-test", ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// oplogEntry is a CRUD entry as mongod logs an insert.
func oplogEntry(i int, ns string) bson.Raw {
	raw, err := bson.Marshal(bson.D{
		{Key: "op", Value: "i"}, {Key: "ns", Value: ns},
		{Key: "o", Value: bson.D{{Key: "_id", Value: int32(i)}, {Key: "x", Value: "v"}}},
		{Key: "ts", Value: bson.Timestamp{T: 1_700_000_000, I: uint32(i + 1)}},
		{Key: "t", Value: int64(1)}, {Key: "v", Value: int64(2)},
	})
	if err != nil {
		panic(err)
	}
	return raw
}

func TestHandshakeAndProbes(t *testing.T) {
	for _, tc := range []struct {
		wire    int32
		version string
	}{{WireVersion80, "8.0.0"}, {WireVersion60, "6.0.0"}, {WireVersion44, "4.4.0"}} {
		t.Run(tc.version, func(t *testing.T) {
			a := startServer(t, Options{MaxWireVersion: tc.wire, SetName: "rs0"})
			b := startServer(t, Options{MaxWireVersion: tc.wire, SetName: "rs0"})
			ca, cb := connect(t, a), connect(t, b)
			ctx := context.Background()
			p, err := conn.ProbeProfile(ctx, ca)
			if err != nil {
				t.Fatal(err)
			}
			if p.Flavor != conn.FlavorMongoDB || p.Version != tc.version {
				t.Errorf("profile %s %s, want MongoDB %s", p.Flavor, p.Version, tc.version)
			}
			id, err := conn.Identify(ctx, ca)
			if err != nil {
				t.Fatal(err)
			}
			if id.SetName != "rs0" || !id.Member || id.Me != a.Addr() || id.ProcessID.IsZero() {
				t.Errorf("identity %+v: want a member of rs0 at %s with a process id", id, a.Addr())
			}
			// Two fixture servers are two deployments; one server twice is one.
			if err := conn.CheckDistinct(ctx, ca, cb); err != nil {
				t.Errorf("two servers: %v", err)
			}
			if err := conn.CheckDistinct(ctx, ca, connect(t, a)); !errors.Is(err, conn.ErrSameDeployment) {
				t.Errorf("one server twice: %v, want ErrSameDeployment", err)
			}
			err = ca.Database("admin").RunCommand(ctx, bson.D{{Key: "shutdown", Value: 1}}).Err()
			var ce mongo.CommandError
			if !errors.As(err, &ce) || ce.Code != codeCommandNotFound {
				t.Errorf("unknown command: %v, want CommandNotFound", err)
			}
			if err := ca.Database("admin").RunCommand(ctx, bson.D{{Key: "endSessions", Value: bson.A{}}}).Err(); err != nil {
				t.Errorf("endSessions: %v", err)
			}
		})
	}
}

// TestTailableAwaitData reads the oplog with a tailable awaitData cursor
// as the tailer opens it: the visible entries first, then entries revealed
// while a getMore waits, then an empty batch after maxAwaitTime.
func TestTailableAwaitData(t *testing.T) {
	var entries RawOplog
	for i := range 30 {
		ns := "app.users"
		if i%5 == 4 {
			ns = "config.system.sessions"
		}
		entries = append(entries, oplogEntry(i, ns))
	}
	s := startServer(t, Options{Oplog: entries, Hidden: 10})
	c := connect(t, s)
	ctx := context.Background()
	filter := bson.D{
		{Key: "ts", Value: bson.D{{Key: "$gt", Value: bson.Timestamp{T: 1_700_000_000, I: 2}}}},
		{Key: "ns", Value: bson.D{{Key: "$nin", Value: bson.A{bson.Regex{Pattern: `^config\.`}, bson.Regex{Pattern: `^local\.`}}}}},
	}
	cur, err := c.Database("local").Collection("oplog.rs").Find(ctx, filter, options.Find().
		SetCursorType(options.TailableAwait).SetMaxAwaitTime(300*time.Millisecond).SetBatchSize(4).SetSort(bson.D{{Key: "$natural", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cur.Close(ctx) }()
	want := func(from, to int) []int {
		var ids []int
		for i := from; i < to; i++ {
			if i%5 != 4 {
				ids = append(ids, i)
			}
		}
		return ids
	}
	read := func() []int {
		var ids []int
		for cur.TryNext(ctx) {
			id, _ := cur.Current.Lookup("o", "_id").Int32OK()
			ids = append(ids, int(id))
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := read(); fmt.Sprint(got) != fmt.Sprint(want(2, 20)) {
		t.Fatalf("visible entries: %v, want %v", got, want(2, 20))
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.Reveal(10)
	}()
	if got := read(); fmt.Sprint(got) != fmt.Sprint(want(20, 30)) {
		t.Fatalf("revealed entries: %v, want %v", got, want(20, 30))
	}
	if cur.ID() == 0 {
		t.Fatal("the tailable cursor closed at the end of the oplog")
	}
	started := time.Now()
	if got := read(); len(got) != 0 {
		t.Fatalf("after the end: %v, want nothing", got)
	}
	if waited := time.Since(started); waited < 250*time.Millisecond {
		t.Errorf("an awaitData getMore at the end returned after %s, want about maxAwaitTime (300ms)", waited)
	}
	if st := s.Stats(); st.Finds != 1 || st.Entries != int64(len(want(2, 30))) {
		t.Errorf("stats %+v: want 1 find and %d entries", st, len(want(2, 30)))
	}
	// The newest and oldest entries, as the tailer's Newest and the
	// window check read them.
	for _, tc := range []struct {
		dir  int
		want uint32
	}{{-1, 30}, {1, 1}} {
		raw, err := c.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{},
			options.FindOne().SetSort(bson.D{{Key: "$natural", Value: tc.dir}}).SetProjection(bson.D{{Key: "ts", Value: 1}})).Raw()
		if err != nil {
			t.Fatal(err)
		}
		if _, i, _ := raw.Lookup("ts").TimestampOK(); i != tc.want {
			t.Errorf("$natural %d: ts increment %d, want %d", tc.dir, i, tc.want)
		}
	}
}

func TestWritesAreCountedAfterTheDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wire  int32
		delay time.Duration
		write func(ctx context.Context, c *mongo.Client) error
		want  Counts
	}{
		{"insertMany", WireVersion80, 0, func(ctx context.Context, c *mongo.Client) error {
			_, err := c.Database("app").Collection("users").InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}})
			return err
		}, Counts{Commands: 1, Writes: 2, Inserts: 2}},
		{"ordered collection BulkWrite", WireVersion70, 2 * time.Millisecond, func(ctx context.Context, c *mongo.Client) error {
			_, err := c.Database("app").Collection("users").BulkWrite(ctx, []mongo.WriteModel{
				mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetReplacement(bson.D{{Key: "a", Value: 1}}).SetUpsert(true),
				mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 2}}}}),
				mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}}),
				mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 4}}),
			}, options.BulkWrite().SetOrdered(true))
			return err
		}, Counts{Commands: 3, Writes: 4, Inserts: 1, Updates: 2, Deletes: 1}},
		{"client bulkWrite", WireVersion80, time.Millisecond, func(ctx context.Context, c *mongo.Client) error {
			_, err := c.BulkWrite(ctx, []mongo.ClientBulkWrite{
				{Database: "app", Collection: "users", Model: mongo.NewClientInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}})},
				{Database: "app", Collection: "orders", Model: mongo.NewClientUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}})},
				{Database: "app", Collection: "users", Model: mongo.NewClientDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}})},
			}, options.ClientBulkWrite().SetOrdered(true).SetVerboseResults(true))
			return err
		}, Counts{Commands: 1, Writes: 3, Inserts: 1, Updates: 1, Deletes: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, Options{MaxWireVersion: tc.wire, WriteDelay: tc.delay})
			c := connect(t, s)
			started := time.Now()
			if err := tc.write(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(started); took < time.Duration(tc.want.Commands)*tc.delay {
				t.Errorf("%d commands acknowledged in %s, want at least %s each", tc.want.Commands, took, tc.delay)
			}
			st := s.Stats()
			if least := time.Duration(tc.want.Commands) * tc.delay; st.Writes.Waited < least {
				t.Errorf("the commands waited %s in all, want at least %s", st.Writes.Waited, least)
			}
			app := st.ByDB["app"]
			st.Writes.Waited, app.Waited = 0, 0
			if st.Writes != tc.want || app != tc.want {
				t.Errorf("counts %+v (app: %+v), want %+v", st.Writes, app, tc.want)
			}
		})
	}
}

// TestTailerReadsGeneratedOplogOnce reads a generated oplog of more
// entries than its pool with the engine's tailer: every entry comes back
// exactly once, in order, byte for byte as replaybench's in-memory reader
// serves it.
func TestTailerReadsGeneratedOplogOnce(t *testing.T) {
	for _, shape := range replaybench.AllShapes {
		t.Run(string(shape), func(t *testing.T) {
			in, err := replaybench.Generate(shape, 1500, replaybench.Mix{}, 1)
			if err != nil {
				t.Fatal(err)
			}
			ops := int64(len(in.Entries))*2 + 321
			o, err := GeneratedOplog(in, ops)
			if err != nil {
				t.Fatal(err)
			}
			s := startServer(t, Options{Oplog: o})
			c := connect(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tailer := source.NewTailer(c, in.From)
			tailer.SkipDatabases = []string{"local", "config", "mongoferry"}
			var want []bson.Raw
			for r := replaybench.NewReader(in, ops, 997); int64(len(want)) < ops; {
				raws, err := r.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, raws...)
			}
			var got int64
			for got < ops {
				raws, err := tailer.Next(ctx)
				if err != nil {
					t.Fatalf("after %d entries: %v", got, err)
				}
				for _, raw := range raws {
					if got >= ops || !bytes.Equal(raw, want[got]) {
						t.Fatalf("entry %d: %s, want %s", got, raw, want[min(got, ops-1)])
					}
					got++
				}
			}
			// Nothing more: the next read waits and returns nothing.
			short, stop := context.WithTimeout(ctx, 700*time.Millisecond)
			defer stop()
			if raws, _ := tailer.Next(short); len(raws) != 0 {
				t.Fatalf("%d entries after the end of the oplog", len(raws))
			}
			newest, err := tailer.Newest(ctx)
			if err != nil || newest != in.TS(ops-1) {
				t.Errorf("Newest %v, %v: want %v", newest, err, in.TS(ops-1))
			}
		})
	}
}

// TestFindOnTheOplog reads the oplog with the queries the fixture knows
// and checks the ones it refuses say so.
func TestFindOnTheOplog(t *testing.T) {
	var entries RawOplog
	for i := range 20 {
		entries = append(entries, oplogEntry(i, "app.users"))
	}
	s := startServer(t, Options{Oplog: entries})
	c := connect(t, s)
	ts := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 1_700_000_000, I: i} }
	for _, tc := range []struct {
		name   string
		coll   string
		filter bson.D
		opts   *options.FindOptionsBuilder
		want   []int32 // _ids, in order
		err    string
	}{
		{"a ts range", "oplog.rs", bson.D{{Key: "ts", Value: bson.D{{Key: "$gte", Value: ts(3)}, {Key: "$lt", Value: ts(6)}}}}, options.Find(), []int32{2, 3, 4}, ""},
		{"one ts", "oplog.rs", bson.D{{Key: "ts", Value: ts(10)}}, options.Find(), []int32{9}, ""},
		{"a limit over small batches", "oplog.rs", bson.D{{Key: "ts", Value: bson.D{{Key: "$gt", Value: ts(14)}}}}, options.Find().SetLimit(4).SetBatchSize(3), []int32{14, 15, 16, 17}, ""},
		{"backwards", "oplog.rs", bson.D{{Key: "ts", Value: bson.D{{Key: "$lte", Value: ts(3)}}}}, options.Find().SetSort(bson.D{{Key: "$natural", Value: -1}}), []int32{2, 1, 0}, ""},
		{"an ns excluded by name", "oplog.rs", bson.D{{Key: "ns", Value: bson.D{{Key: "$nin", Value: bson.A{"app.users"}}}}}, options.Find(), nil, ""},
		{"another collection is empty", "startup_log", bson.D{}, options.Find(), nil, ""},
		{"another filter field", "oplog.rs", bson.D{{Key: "op", Value: "i"}}, options.Find(), nil, "filters the oplog on ts and ns only"},
		{"another sort", "oplog.rs", bson.D{}, options.Find().SetSort(bson.D{{Key: "wall", Value: 1}}), nil, "sorts the oplog by $natural or ts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cur, err := c.Database("local").Collection(tc.coll).Find(ctx, tc.filter, tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one that says %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int32
			for cur.Next(ctx) {
				id, _ := cur.Current.Lookup("o", "_id").Int32OK()
				got = append(got, id)
			}
			if err := cur.Err(); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("_ids %v, want %v", got, tc.want)
			}
		})
	}
}
