package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// fakeShardKeys stands in for a sharded target's mongos: the key of
// every collection and the documents it holds (as they are when the
// command goes out; the writes are only recorded).
type fakeShardKeys struct {
	key   targetsharding.Key
	docs  []bson.Raw
	reads int
}

func (f *fakeShardKeys) Key(context.Context, catalog.Namespace) (targetsharding.Key, error) {
	return f.key, nil
}

func (f *fakeShardKeys) Current(_ context.Context, _ catalog.Namespace, _ targetsharding.Key, ids []bson.RawValue) ([]bson.Raw, error) {
	f.reads++
	var out []bson.Raw
	for _, d := range f.docs {
		for _, id := range ids {
			if d.Lookup("_id").Equal(id) {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

func extJSON(v any) string {
	b, err := bson.MarshalExtJSON(v, false, false)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// describe writes a model as the command carries it: its kind and filter.
func describe(m mongo.WriteModel) string {
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		return "insert (no filter: routed by the document)"
	case *mongo.ReplaceOneModel:
		return "replace upsert " + extJSON(m.Filter)
	case *mongo.UpdateOneModel:
		return "update " + extJSON(m.Filter)
	case *mongo.DeleteOneModel:
		return "delete " + extJSON(m.Filter)
	}
	return fmt.Sprintf("%T", m)
}

// sendEntries puts entries through a Replayer's writer path (dispatch's
// item, expand, the planner, the command) with a target sharded on key,
// and returns each write as sent, "re-read" for a document re-read from
// the source. A target that has dup reports a duplicate key on inserts,
// as the copy/replay overlap does.
func sendEntries(t *testing.T, major int, sk *fakeShardKeys, tr oplog.Translator, shardMember, dup bool, entries ...bson.D) []string {
	t.Helper()
	spec := config.Spec{Cache: config.Cache{BatchSize: 100}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	var sent []string
	apply := func(_ context.Context, _ catalog.Namespace, models []mongo.WriteModel) error {
		var bwe mongo.BulkWriteException
		for i, m := range models {
			sent = append(sent, describe(m))
			if _, ok := m.(*mongo.InsertOneModel); ok && dup {
				bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: i, Code: 11000, Message: "E11000 duplicate key"}})
			}
		}
		if len(bwe.WriteErrors) > 0 {
			return bwe
		}
		return nil
	}
	r := New(Options{Task: "t", Spec: &spec, Mapper: mapper, Apply: apply, ShardKeys: sk, TargetMajor: major,
		Translator: tr, ShardMember: shardMember})
	ctx := context.Background()
	var batch []item
	for i, d := range entries {
		e, err := oplog.Parse(mustRaw(t, append(bson.D{{Key: "ts", Value: bson.Timestamp{T: 10, I: uint32(i + 1)}}, {Key: "t", Value: int64(1)}, {Key: "ns", Value: "shop.users"}}, d...)))
		if err != nil {
			t.Fatal(err)
		}
		key, err := e.DocKey()
		if err != nil {
			t.Fatal(err)
		}
		ns := catalog.ParseNamespace("shop.users")
		tk, err := r.targetKeyOf(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		it := item{ts: e.TS(), ns: ns, src: ns, key: key, kind: e.Kind().String(), op: e, tk: tk}
		r.queues = make([]chan *[]item, 1)
		r.bucket(&it)
		batch = append(batch, it)
	}
	w := r.newWriter(nil)
	w.expanded, w.ws, err = r.expand(batch, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rn := range w.p.plan(w.expanded) {
		if rn.cmd == cmdRefetch {
			for range rn.items {
				sent = append(sent, "re-read")
			}
			continue
		}
		if err := r.applyRun(ctx, rn); err != nil {
			t.Fatal(err)
		}
	}
	return sent
}

// TestShardKeyFilters: every write kind replay makes, on a target sharded
// on each key shape, for each target version: the exact filter sent. The
// target holds {_id: 7, sk: 5, region: "EU", a: {b: 1}}; the source is a
// replica set (its entries carry _id alone) unless the case says
// otherwise. fakeShardKeys stands in for the target's mongos (no sharded
// cluster runs here); test/shardsim checks the same writes against a
// model of mongos's routing rules.
func TestShardKeyFilters(t *testing.T) {
	current := bson.D{{Key: "_id", Value: int32(7)}, {Key: "sk", Value: int32(5)}, {Key: "region", Value: "EU"}, {Key: "a", Value: bson.D{{Key: "b", Value: int32(1)}}}, {Key: "v", Value: int32(1)}}
	newDoc := bson.D{{Key: "_id", Value: int32(7)}, {Key: "sk", Value: int32(6)}, {Key: "region", Value: "EU"}, {Key: "a", Value: bson.D{{Key: "b", Value: int32(1)}}}, {Key: "v", Value: int32(2)}}
	id := bson.D{{Key: "_id", Value: int32(7)}}
	diff := func(d bson.D) bson.D { return bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: d}} }
	u := func(f bson.D) bson.D { return diff(bson.D{{Key: "u", Value: f}}) }

	type shape struct {
		name string
		key  targetsharding.Key
		// old is the filter of a write placed by the key the target has
		// now; written, by the key of the document written.
		old, written string
	}
	shapes := []shape{
		{"ranged", targetsharding.Key{{Name: "sk"}}, `{"sk":5,"_id":7}`, `{"sk":6,"_id":7}`},
		{"compound", targetsharding.Key{{Name: "region"}, {Name: "a.b"}}, `{"region":"EU","a.b":1,"_id":7}`, `{"region":"EU","a.b":1,"_id":7}`},
		{"hashed", targetsharding.Key{{Name: "sk", Hashed: true}}, `{"sk":5,"_id":7}`, `{"sk":6,"_id":7}`},
		{"_id only", targetsharding.Key{{Name: "_id"}}, `{"_id":7}`, `{"_id":7}`},
	}
	type kind struct {
		name        string
		entries     []bson.D
		tr          oplog.Translator
		shardMember bool
		dup         bool
		missing     bool // the target has no document 7
		// want returns the writes sent for a shape and whether the
		// target is 7.1 or later.
		want func(s shape, relaxed bool) []string
	}
	insert := bson.D{{Key: "op", Value: "i"}, {Key: "o", Value: newDoc}}
	kinds := []kind{
		{name: "insert", entries: []bson.D{insert}, missing: true,
			want: func(shape, bool) []string { return []string{"insert (no filter: routed by the document)"} }},
		{name: "insert meeting a duplicate key, then its replacement", entries: []bson.D{insert}, dup: true,
			want: func(s shape, _ bool) []string {
				return []string{"insert (no filter: routed by the document)", "replace upsert " + s.old}
			}},
		// A shard's insert keeps its own document key {sk: 6, _id: 7}:
		// the target's document {sk: 5} is another shard's, which the
		// upsert meets on _id instead of replacing it (conflict.go).
		{name: "insert of a shard's subtask (an upsert)", shardMember: true,
			entries: []bson.D{{{Key: "op", Value: "i"}, {Key: "o", Value: newDoc}, {Key: "o2", Value: bson.D{{Key: "sk", Value: int32(6)}, {Key: "_id", Value: int32(7)}}}}},
			want: func(s shape, _ bool) []string {
				own := map[string]string{"ranged": s.written, "hashed": s.written, "_id only": `{"sk":6,"_id":7}`,
					"compound": `{"region":"EU","a.b":1,"_id":7,"sk":6}`}
				return []string{"replace upsert " + own[s.name]}
			}},
		{name: "$v:2 update", entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: u(bson.D{{Key: "v", Value: int32(2)}})}, {Key: "o2", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"update " + s.old} }},
		{name: "$v:2 update of a missing document", missing: true, entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: u(bson.D{{Key: "v", Value: int32(2)}})}, {Key: "o2", Value: id}}},
			want: func(shape, bool) []string { return []string{`update {"_id":7}`} }},
		{name: "replacement (changes sk)", entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: newDoc}, {Key: "o2", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"replace upsert " + s.old} }},
		{name: "replacement of a missing document", missing: true, entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: newDoc}, {Key: "o2", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"replace upsert " + s.written} }},
		// A top-level $ field: a pipeline update replaces the document
		// (sink.Replace), filtered as the replacement would be.
		{name: "replacement with a top-level $ field (changes sk)", entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: append(newDoc[:len(newDoc):len(newDoc)], bson.E{Key: "$p", Value: int32(1)})}, {Key: "o2", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"update " + s.old} }},
		{name: "replacement with a top-level $ field of a missing document", missing: true, entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: append(newDoc[:len(newDoc):len(newDoc)], bson.E{Key: "$p", Value: int32(1)})}, {Key: "o2", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"update " + s.written} }},
		{name: "delete", entries: []bson.D{{{Key: "op", Value: "d"}, {Key: "o", Value: id}}},
			want: func(s shape, _ bool) []string { return []string{"delete " + s.old} }},
		{name: "delete of a missing document", missing: true, entries: []bson.D{{{Key: "op", Value: "d"}, {Key: "o", Value: id}}},
			want: func(shape, bool) []string { return []string{`delete {"_id":7}`} }},
		{name: "delete from a sharded source (document key kept)", entries: []bson.D{{{Key: "op", Value: "d"}, {Key: "o", Value: bson.D{{Key: "sk", Value: int32(4)}, {Key: "region", Value: "US"}, {Key: "a.b", Value: int32(0)}, {Key: "_id", Value: int32(7)}}}}},
			want: func(shape, bool) []string { return []string{`delete {"sk":4,"region":"US","a.b":0,"_id":7}`} }},
		{name: "shard-key change ($v:2 sets sk and region), then an update",
			entries: []bson.D{
				{{Key: "op", Value: "u"}, {Key: "o", Value: u(bson.D{{Key: "sk", Value: int32(6)}, {Key: "region", Value: "US"}})}, {Key: "o2", Value: id}},
				{{Key: "op", Value: "u"}, {Key: "o", Value: u(bson.D{{Key: "v", Value: int32(3)}})}, {Key: "o2", Value: id}},
			},
			want: func(s shape, _ bool) []string {
				after := map[string]string{"ranged": `{"sk":6,"_id":7}`, "compound": `{"region":"US","a.b":1,"_id":7}`, "hashed": `{"sk":6,"_id":7}`, "_id only": `{"_id":7}`}[s.name]
				return []string{"update " + s.old, "update " + after}
			}},
		{name: "shard-key change through a path above a key field, then a replacement",
			entries: []bson.D{
				{{Key: "op", Value: "u"}, {Key: "o", Value: u(bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: int32(2)}}}})}, {Key: "o2", Value: id}},
				{{Key: "op", Value: "u"}, {Key: "o", Value: newDoc}, {Key: "o2", Value: id}},
			},
			want: func(s shape, relaxed bool) []string {
				switch {
				case s.name != "compound":
					return []string{"update " + s.old, "replace upsert " + s.old}
				case relaxed:
					// mongos 7.1+ finds the document wherever it is.
					return []string{"update " + s.old, `replace upsert {"_id":7}`}
				}
				// Up to 7.0 the change is written as the source has the
				// document, then the replacement by the key it has then
				// (this fake target does not apply writes).
				return []string{"re-read", "replace upsert " + s.old}
			}},
		{name: "FerretDB whole-document $set", tr: oplog.Translator{WholeDocumentUpdates: true},
			entries: []bson.D{{{Key: "op", Value: "u"}, {Key: "o", Value: bson.D{{Key: "$v", Value: int32(1)}, {Key: "$set", Value: newDoc}}}, {Key: "o2", Value: id}}},
			want:    func(s shape, _ bool) []string { return []string{"replace upsert " + s.old} }},
	}
	for _, major := range []int{5, 6, 7, 8} {
		for _, s := range shapes {
			for _, k := range kinds {
				t.Run(fmt.Sprintf("%d.0/%s/%s", major, s.name, k.name), func(t *testing.T) {
					sk := &fakeShardKeys{key: s.key}
					if !k.missing {
						sk.docs = []bson.Raw{mustRaw(t, current)}
					}
					got := sendEntries(t, major, sk, k.tr, k.shardMember, k.dup, k.entries...)
					want := k.want(s, major >= 8)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("sent\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
					}
					if s.name == "_id only" && sk.reads > 0 {
						t.Errorf("%d reads of the target for a key that is _id alone", sk.reads)
					}
				})
			}
		}
	}
}

// TestShardKeyFiltersKeepTheDocumentKey: a sharded source's writes that
// carry the target's whole key go as they are, with no read of the
// target; an unsharded target collection changes nothing.
func TestShardKeyFiltersKeepTheDocumentKey(t *testing.T) {
	o2 := bson.D{{Key: "sk", Value: int32(5)}, {Key: "_id", Value: int32(7)}}
	upd := bson.D{{Key: "op", Value: "u"}, {Key: "o", Value: bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "sk", Value: int32(6)}}}}}}}, {Key: "o2", Value: o2}}
	del := bson.D{{Key: "op", Value: "d"}, {Key: "o", Value: bson.D{{Key: "sk", Value: int32(6)}, {Key: "_id", Value: int32(8)}}}}
	for _, c := range []struct {
		name  string
		key   targetsharding.Key
		want  string
		reads int
	}{
		{"sharded on sk", targetsharding.Key{{Name: "sk"}}, `update {"sk":5,"_id":7}` + "\n" + `delete {"sk":6,"_id":8}`, 0},
		{"not sharded", nil, `update {"sk":5,"_id":7}` + "\n" + `delete {"sk":6,"_id":8}`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			sk := &fakeShardKeys{key: c.key}
			got := strings.Join(sendEntries(t, 7, sk, oplog.Translator{}, true, false, upd, del), "\n")
			if got != c.want {
				t.Errorf("sent\n%s\nwant\n%s", got, c.want)
			}
			if sk.reads != c.reads {
				t.Errorf("%d reads of the target, want %d", sk.reads, c.reads)
			}
		})
	}
}
