package verify

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// settledPositions stands in for a replay that has applied everything: a
// pair nobody writes to, so every recheck is due at once.
type settledPositions struct{}

func (settledPositions) Now(context.Context) (Position, error) {
	return Position{TS: bson.Timestamp{T: 1}, At: time.Now()}, nil
}

func (settledPositions) Passed(context.Context, Position) (bool, error) { return true, nil }

// TestStreamerDifferences runs streaming passes over two FerretDB servers
// holding the same documents but for what each case changes on the
// target: each difference is named with its kind, on either side, and a
// recheck budget too small to hold them says so instead of dropping them.
func TestStreamerDifferences(t *testing.T) {
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ctx := context.Background()
	ids := mixedIDs(120)
	cases := []struct {
		name   string
		db     string
		change func(c *mongo.Collection) error
		budget int64
		want   []Finding // in the order the pass reports them
		notRe  int64
	}{
		{"equal", "eq", func(*mongo.Collection) error { return nil }, 1 << 20, nil, 0},
		{"changed", "chg", func(c *mongo.Collection) error {
			_, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: int32(6)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: int32(-1)}}}})
			return err
		}, 1 << 20, []Finding{{Namespace: "chg.items", ID: `{"$numberInt":"6"}`, Kind: "changed"}}, 0},
		{"missing and extra", "mx", func(c *mongo.Collection) error {
			if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: "s-002"}}); err != nil {
				return err
			}
			_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "stray"}})
			return err
		}, 1 << 20, []Finding{{Namespace: "mx.items", ID: `"s-002"`, Kind: "missing"}, {Namespace: "mx.items", ID: `"stray"`, Kind: "extra"}}, 0},
		{"an _id of another type is missing and extra", "typ", func(c *mongo.Collection) error {
			if _, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: int32(12)}}); err != nil {
				return err
			}
			_, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: int64(12)}})
			return err
		}, 1 << 20, []Finding{{Namespace: "typ.items", ID: `{"$numberInt":"12"}`, Kind: "missing"}, {Namespace: "typ.items", ID: `{"$numberLong":"12"}`, Kind: "extra"}}, 0},
		// Room for one pending mismatch: _id 0 waits; 6 finds no room even
		// after 0's first recheck and is counted; 18 gets the room 0's
		// second (last) recheck frees.
		{"budget for one mismatch of three", "full", func(c *mongo.Collection) error {
			_, err := c.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{int32(0), int32(6), int32(18)}}}}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: int32(-1)}}}})
			return err
		}, entryOverhead + 8, []Finding{{Namespace: "full.items", ID: `{"$numberInt":"0"}`, Kind: "changed"}, {Namespace: "full.items", ID: `{"$numberInt":"18"}`, Kind: "changed"}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := config.Namespaces{Include: []string{tc.db + `\..*`}}
			seed(t, catalog.Namespace{DB: tc.db, Coll: "items"}, ids, source, target)
			if err := tc.change(target.Database(tc.db).Collection("items")); err != nil {
				t.Fatal(err)
			}
			sv := NewStreamer(source, target, StreamOptions{Positions: settledPositions{}, Rechecks: 2, MaxPendingBytes: tc.budget, Batch: 25})
			st, err := sv.Run(ctx, list(t, source, ns))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", st)
			if !slices.Equal(st.Findings, tc.want) || st.Persisting != int64(len(tc.want)) {
				t.Errorf("findings %d %+v, want %+v", st.Persisting, st.Findings, tc.want)
			}
			if st.NotRechecked != tc.notRe || st.PendingFull != (tc.notRe > 0) {
				t.Errorf("not rechecked %d (full %v), want %d", st.NotRechecked, st.PendingFull, tc.notRe)
			}
			if st.OK != (len(tc.want) == 0 && tc.notRe == 0) || st.Compared != int64(len(ids)) || st.PendingRechecks != 0 || st.PendingBytes != 0 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestStreamerReserve: a reserved pass keeps every other pass out until it
// has run, so "started" answered at reservation is true; after it ran,
// the next pass may start, and the reserved one counts as a pass.
func TestStreamerReserve(t *testing.T) {
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ctx := context.Background()
	seed(t, catalog.Namespace{DB: "res", Coll: "items"}, mixedIDs(10), source, target)
	colls := list(t, source, config.Namespaces{Include: []string{`res\..*`}})
	sv := NewStreamer(source, target, StreamOptions{Positions: settledPositions{}, Rechecks: 1, MaxPendingBytes: 1 << 20})
	run, err := sv.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sv.Reserve(); !errors.Is(err, ErrPassRunning) {
		t.Errorf("second reservation: %v, want ErrPassRunning", err)
	}
	if _, err := sv.Run(ctx, colls); !errors.Is(err, ErrPassRunning) {
		t.Errorf("a pass beside a reserved one: %v, want ErrPassRunning", err)
	}
	if st, err := run(ctx, colls); err != nil || !st.OK || st.Passes != 1 {
		t.Fatalf("the reserved pass: %v, %+v", err, st)
	}
	if st, err := sv.Run(ctx, colls); err != nil || !st.OK || st.Passes != 2 {
		t.Errorf("the pass after it: %v, %+v", err, st)
	}
}
