package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWriteCommandsOnAServer sends commands built from raw documents to
// a real server (FerretDB) and compares the collection with what the
// commands should leave, and the errors with what the driver's BulkWrite
// reports: an unordered insert meeting existing documents applies every
// other document and names the duplicates (a Conflict, with the models
// that failed); an ordered update stops at its failing statement.
func TestWriteCommandsOnAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	client := testserver.Start(t).MustClient(t)
	doc := func(id, v int32) bson.Raw { return raw(t, bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}}) }
	key := func(id int32) bson.Raw { return raw(t, bson.D{{Key: "_id", Value: id}}) }
	set := func(v int32) bson.Raw { return raw(t, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: v}}}}) }
	yes := true
	type command struct {
		kind    CommandKind
		ordered bool
		models  []mongo.WriteModel
	}
	cases := []struct {
		name     string
		existing []bson.Raw
		commands []command
		want     []bson.Raw
		// dups: indexes of the duplicate keys the last command reports.
		dups []int
		// failAt: an ordered command stops at a refused write. (FerretDB
		// v1.24 names the first statement of the command as the failing
		// one, whichever failed; MongoDB names the failing one. The
		// indexes are compared with those of the driver's BulkWrite.)
		failAt bool
	}{
		{"inserts, updates, replacements, deletes", nil, []command{
			{InsertCommand, false, []mongo.WriteModel{&mongo.InsertOneModel{Document: doc(1, 1)}, &mongo.InsertOneModel{Document: doc(2, 1)}, &mongo.InsertOneModel{Document: doc(3, 1)}}},
			{UpdateCommand, true, []mongo.WriteModel{
				&mongo.UpdateOneModel{Filter: key(1), Update: set(2)},
				&mongo.ReplaceOneModel{Filter: key(2), Replacement: doc(2, 7), Upsert: &yes},
				&mongo.ReplaceOneModel{Filter: key(4), Replacement: doc(4, 1), Upsert: &yes},
			}},
			{DeleteCommand, true, []mongo.WriteModel{&mongo.DeleteOneModel{Filter: key(3)}, &mongo.DeleteOneModel{Filter: key(9)}}},
		}, []bson.Raw{doc(1, 2), doc(2, 7), doc(4, 1)}, nil, false},
		{"unordered inserts meet existing documents", []bson.Raw{doc(2, 0), doc(4, 0)}, []command{
			{InsertCommand, false, []mongo.WriteModel{
				&mongo.InsertOneModel{Document: doc(1, 1)}, &mongo.InsertOneModel{Document: doc(2, 1)}, &mongo.InsertOneModel{Document: doc(3, 1)},
				&mongo.InsertOneModel{Document: doc(4, 1)}, &mongo.InsertOneModel{Document: doc(5, 1)},
			}},
		}, []bson.Raw{doc(1, 1), doc(2, 0), doc(3, 1), doc(4, 0), doc(5, 1)}, []int{1, 3}, false},
		{"an ordered update stops at a refused write", []bson.Raw{doc(1, 0), doc(2, 0)}, []command{
			{UpdateCommand, true, []mongo.WriteModel{
				&mongo.UpdateOneModel{Filter: key(1), Update: set(5)},
				&mongo.UpdateOneModel{Filter: key(2), Update: raw(t, bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: "x"}}}})},
				&mongo.UpdateOneModel{Filter: key(2), Update: set(5)},
			}},
		}, []bson.Raw{doc(1, 5), doc(2, 0)}, nil, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The same commands through the driver's BulkWrite, into a
			// twin collection: the raw commands must leave what it
			// leaves and report what it reports.
			var results [2]struct {
				err  error
				docs []bson.Raw
			}
			for j, via := range []string{"raw", "driver"} {
				coll := client.Database("sinkcmd").Collection(fmt.Sprintf("c%d_%s", i, via))
				for _, d := range c.existing {
					if _, err := coll.InsertOne(ctx, d); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				for _, cmd := range c.commands {
					if via == "driver" {
						_, err = coll.BulkWrite(ctx, cmd.models, options.BulkWrite().SetOrdered(cmd.ordered).SetBypassDocumentValidation(true))
						continue
					}
					b, ok := AppendWriteCommand(nil, coll.Name(), cmd.kind, cmd.models, cmd.ordered, nil)
					if !ok {
						t.Fatalf("command not covered")
					}
					_, err = RunWriteCommand(ctx, coll.Database(), b, cmd.models)
				}
				results[j].err = err
				cur, ferr := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
				if ferr != nil {
					t.Fatal(ferr)
				}
				if ferr := cur.All(ctx, &results[j].docs); ferr != nil {
					t.Fatal(ferr)
				}
			}
			err := results[0].err
			if got, want := fmt.Sprint(results[0].docs), fmt.Sprint(c.want); got != want {
				t.Errorf("collection holds\n%s\nwant\n%s", got, want)
			}
			if got, want := fmt.Sprint(results[1].docs), fmt.Sprint(c.want); got != want {
				t.Errorf("through the driver, the collection holds\n%s\nwant\n%s", got, want)
			}
			if got, want := describeErr(err), describeErr(results[1].err); got != want {
				t.Errorf("error %s, the driver's %s", got, want)
			}
			var bwe mongo.BulkWriteException
			switch {
			case c.dups != nil:
				if !errors.As(err, &bwe) || Classify(err) != Conflict {
					t.Fatalf("error %v (class %v), want duplicate keys", err, Classify(err))
				}
				var got []int
				last := c.commands[len(c.commands)-1].models
				for _, we := range bwe.WriteErrors {
					got = append(got, we.Index)
					if we.Request != last[we.Index] {
						t.Errorf("write error %d names model %v", we.Index, we.Request)
					}
				}
				if !slices.Equal(got, c.dups) {
					t.Errorf("duplicates at %v, want %v", got, c.dups)
				}
			case c.failAt:
				if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 {
					t.Fatalf("error %v, want one write error", err)
				}
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

// describeErr is what the engine reads in a bulk write's error: its
// class, and each write error's index and code.
func describeErr(err error) string {
	if err == nil {
		return "none"
	}
	s := Classify(err).String()
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		for _, we := range bwe.WriteErrors {
			s += fmt.Sprintf(" [%d: %d]", we.Index, we.Code)
		}
		if bwe.WriteConcernError != nil {
			s += fmt.Sprintf(" write concern %d", bwe.WriteConcernError.Code)
		}
	}
	return s
}

// TestAppendWriteCommand checks which batches the builder leaves to the
// driver, and that a declined batch leaves dst as it was.
func TestAppendWriteCommand(t *testing.T) {
	key := raw(t, bson.D{{Key: "_id", Value: 1}})
	cases := []struct {
		name    string
		kind    CommandKind
		models  []mongo.WriteModel
		wc      *writeconcern.WriteConcern
		covered bool
	}{
		{"inserts", InsertCommand, []mongo.WriteModel{&mongo.InsertOneModel{Document: key}}, nil, true},
		{"majority write concern", DeleteCommand, []mongo.WriteModel{&mongo.DeleteOneModel{Filter: key}}, writeconcern.Majority(), true},
		{"unacknowledged write concern", DeleteCommand, []mongo.WriteModel{&mongo.DeleteOneModel{Filter: key}}, writeconcern.Unacknowledged(), false},
		{"an insert without _id", InsertCommand, []mongo.WriteModel{&mongo.InsertOneModel{Document: raw(t, bson.D{{Key: "a", Value: 1}})}}, nil, false},
		{"a document not given as bytes", InsertCommand, []mongo.WriteModel{&mongo.InsertOneModel{Document: bson.D{{Key: "_id", Value: 1}}}}, nil, false},
		{"a truncated filter", DeleteCommand, []mongo.WriteModel{&mongo.DeleteOneModel{Filter: key[:len(key)-1]}}, nil, false},
		{"a model of another kind", UpdateCommand, []mongo.WriteModel{&mongo.DeleteOneModel{Filter: key}}, nil, false},
		{"array filters", UpdateCommand, []mongo.WriteModel{&mongo.UpdateOneModel{Filter: key, Update: key, ArrayFilters: []any{key}}}, nil, false},
		{"a delete of many", DeleteCommand, []mongo.WriteModel{&mongo.DeleteManyModel{Filter: key}}, nil, false},
		{"no writes", InsertCommand, nil, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, ok := AppendWriteCommand([]byte("x"), "c", c.kind, c.models, true, c.wc)
			if ok != c.covered {
				t.Fatalf("covered %v, want %v", ok, c.covered)
			}
			if !ok && string(b) != "x" {
				t.Fatalf("declined, and dst holds %q", b)
			}
			if ok {
				if err := bson.Raw(b[1:]).Validate(); err != nil {
					t.Fatal(err)
				}
				if wc, err := bson.Raw(b[1:]).LookupErr("writeConcern"); (err == nil) != (c.wc != nil) {
					t.Errorf("writeConcern %v, want %v", wc, c.wc)
				}
			}
		})
	}
}
