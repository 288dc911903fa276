package docfilter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
)

// TestMatchAgreesWithFerretDB runs the evaluation table against a real
// server: every case's documents go into a FerretDB collection of their
// own (with _id set to their position) and the case's query runs there
// with find. The documents find returns must be the ones Match accepts,
// except for the cases whose ferretDeparts field says how FerretDB departs
// from MongoDB's documented behaviour; those must still depart, so that
// the list stays true. Cases with values FerretDB cannot store
// (unstorable) are left to TestMatchTable.
func TestMatchAgreesWithFerretDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a FerretDB server (make ferretdb); skipped with -short")
	}
	srv := testserver.Start(t, testserver.Options{OplogBytes: -1})
	db := srv.MustClient(t).Database("docfilter")
	ctx := context.Background()

	var ran, agreed int
	var departures []string
	for i, c := range docfilter.TableCases(t) {
		if c.Unstorable != "" {
			continue
		}
		ran++
		name := fmt.Sprintf("%03d", i)
		got, err := ferretFind(ctx, db.Collection("c"+name), c.Docs, c.Filter)
		if err != nil {
			got = "error: " + err.Error()
		}
		switch {
		case got == c.Want && c.FerretDeparts == "":
			agreed++
		case got == c.Want:
			t.Errorf("case %s %s: FerretDB now agrees (%s); drop its ferretDeparts", name, c.Query, got)
		case c.FerretDeparts == "":
			t.Errorf("case %s %s on %v: FerretDB finds %s, Match (MongoDB) %s", name, c.Query, c.Docs, got, c.Want)
		default:
			departures = append(departures, fmt.Sprintf("%s %s: FerretDB %s, MongoDB %s: %s", name, c.Query, got, c.Want, c.FerretDeparts))
		}
	}
	t.Logf("%d cases on FerretDB: %d agree, %d departures:\n%s", ran, agreed, len(departures), strings.Join(departures, "\n"))
}

// ferretFind stores docs with _id 0, 1, ... and returns which of them
// find(query) returns, one 1 or 0 per document as matchCase.want.
func ferretFind(ctx context.Context, coll *mongo.Collection, docs []bson.Raw, query bson.Raw) (string, error) {
	batch := make([]any, len(docs))
	for j, raw := range docs {
		var d bson.D
		if err := bson.Unmarshal(raw, &d); err != nil {
			return "", err
		}
		batch[j] = append(bson.D{{Key: "_id", Value: int32(j)}}, d...)
	}
	if _, err := coll.InsertMany(ctx, batch); err != nil {
		return "", fmt.Errorf("insert: %w", err)
	}
	cur, err := coll.Find(ctx, query, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return "", err
	}
	var found []struct {
		ID int32 `bson:"_id"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return "", err
	}
	out := []byte(strings.Repeat("0", len(docs)))
	for _, f := range found {
		out[f.ID] = '1'
	}
	return string(out), nil
}
