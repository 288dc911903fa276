package replay

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// dollarTarget models how MongoDB 5.0+ stores documents with top-level
// '$' fields: an insert takes them; a replacement (replaceOne, or an
// upserting update with a replacement document) refuses them with
// DollarPrefixedFieldName (52); a pipeline update
// [{$replaceWith: {$literal: doc}}] stores doc as it is.
type dollarTarget struct {
	mu   sync.Mutex
	docs map[string]bson.Raw // _id as JSON -> document
	sent []string            // model kind per write
}

func (f *dollarTarget) apply(_ context.Context, _ catalog.Namespace, models []mongo.WriteModel) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var bwe mongo.BulkWriteException
	for i, m := range models {
		err := f.write(m)
		if err == nil {
			continue
		}
		bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: *err})
		bwe.WriteErrors[len(bwe.WriteErrors)-1].Index = i
		if _, ins := m.(*mongo.InsertOneModel); !ins {
			break // ordered
		}
	}
	if len(bwe.WriteErrors) > 0 {
		return bwe
	}
	return nil
}

func (f *dollarTarget) write(m mongo.WriteModel) *mongo.WriteError {
	key := func(d any) string { return d.(bson.Raw).Lookup("_id").String() }
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		f.sent = append(f.sent, "insert")
		if _, ok := f.docs[key(m.Document)]; ok {
			return &mongo.WriteError{Code: 11000, Message: "E11000 duplicate key"}
		}
		f.docs[key(m.Document)] = m.Document.(bson.Raw)
	case *mongo.ReplaceOneModel:
		f.sent = append(f.sent, "replace")
		doc := m.Replacement.(bson.Raw)
		if sink.TopLevelDollar(doc) {
			return &mongo.WriteError{Code: 52, Message: "The dollar ($) prefixed field is not allowed in the context of an update's replacement document"}
		}
		f.docs[key(m.Filter)] = doc
	case *mongo.UpdateOneModel:
		p, ok := m.Update.(sink.Pipeline)
		if !ok {
			return &mongo.WriteError{Code: 2, Message: fmt.Sprintf("only $replaceWith pipelines are modelled, not %T", m.Update)}
		}
		f.sent = append(f.sent, "pipeline")
		f.docs[key(m.Filter)] = bson.RawArray(p).Index(0).Document().Lookup("$replaceWith", "$literal").Document()
	}
	return nil
}

// TestReplayDollarFields: documents with top-level '$' fields reach the
// target through every replacing path of replay: an insert over a copied
// document (the copy/replay overlap: the insert meets a duplicate key and
// is replaced by its key) and a replacement update. Before, both failed
// with code 52 on every restart. A document without such a field still
// goes as a plain replacement.
func TestReplayDollarFields(t *testing.T) {
	doc := func(kv ...any) bson.Raw {
		d := bson.D{}
		for i := 0; i+1 < len(kv); i += 2 {
			d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
		}
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	entry := func(i uint32, op string, o, o2 bson.Raw) bson.Raw {
		kv := []any{"ts", bson.Timestamp{T: 100, I: i}, "t", int64(1), "op", op, "ns", "db.c", "o", o}
		if o2 != nil {
			kv = append(kv, "o2", o2)
		}
		return doc(kv...)
	}
	f := &dollarTarget{docs: map[string]bson.Raw{
		doc("_id", 1).Lookup("_id").String(): doc("_id", 1, "$price", 1), // copied
		doc("_id", 2).Lookup("_id").String(): doc("_id", 2, "x", 1),
	}}
	entries := []bson.Raw{
		entry(1, "i", doc("_id", 1, "$price", 2, "n", bson.D{{Key: "$q", Value: 1}}), nil),
		entry(2, "u", doc("_id", 1, "$price", 3, "a.b", 1), doc("_id", 1)),
		entry(3, "u", doc("_id", 2, "x", 2, "n", bson.D{{Key: "$q", Value: 1}}), doc("_id", 2)),
	}
	want := map[string]bson.Raw{
		doc("_id", 1).Lookup("_id").String(): doc("_id", 1, "$price", 3, "a.b", 1),
		doc("_id", 2).Lookup("_id").String(): doc("_id", 2, "x", 2, "n", bson.D{{Key: "$q", Value: 1}}),
	}
	spec := config.Spec{}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	reader := source.NewScripted(bson.Timestamp{T: 100}, entries...)
	r := New(Options{Task: "t", Spec: &spec, Reader: reader, Mapper: mapper, From: bson.Timestamp{T: 100},
		CheckpointInterval: time.Hour, Apply: f.apply})
	runUntil(t, r, bson.Timestamp{T: 100, I: 3}, 10*time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, w := range want {
		if !bytes.Equal(f.docs[k], w) {
			t.Errorf("_id %s: target %s, want %s", k, f.docs[k], w)
		}
	}
	t.Logf("writes sent: %v", f.sent)
}

// runUntil runs r until its checkpoint reaches last, failing the test
// when replay stops first or does not get there within d.
func runUntil(t *testing.T, r *Replayer, last bson.Timestamp, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(d); r.Checkpoint() != last; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("replay stopped at %v before %v: %v", r.Checkpoint(), last, err)
		default:
		}
		if time.Now().After(deadline) {
			break
		}
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if got := r.Checkpoint(); got != last {
		t.Fatalf("replay reached %v within %s, want %v", got, d, last)
	}
}
