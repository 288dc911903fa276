package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// Writes on a sharded target: before a command goes out, every write of a
// sharded target collection gets the target's whole shard key in its
// filter (the key the document has on the target now, read with one query
// per command), so that mongos routes it to one shard and a shard-key
// change it makes is allowed. What mongos accepts by version and the
// filter each kind of write gets: docs/sharded.md, "Replay on a sharded
// target".

// ShardKeys tells the writers how a sharded target shards its
// collections and where its documents are.
type ShardKeys interface {
	// Key returns the target's shard key of ns; nil when the target does
	// not shard ns.
	Key(ctx context.Context, ns catalog.Namespace) (targetsharding.Key, error)
	// Current returns the documents of ns with these _id values as the
	// target holds them now, each with _id and the fields of key.
	Current(ctx context.Context, ns catalog.Namespace, key targetsharding.Key, ids []bson.RawValue) ([]bson.Raw, error)
}

// TargetShardKeys is the ShardKeys of a sharded target, read through its
// mongos.
type TargetShardKeys struct{ Router *mongo.Client }

// Key reads ns's shard key from the target's config.collections.
func (t TargetShardKeys) Key(ctx context.Context, ns catalog.Namespace) (targetsharding.Key, error) {
	k, ok, err := targetsharding.ReadKey(ctx, t.Router, ns.String())
	if err != nil || !ok {
		return nil, err
	}
	return k, nil
}

// Current finds the documents by _id, projected on the key.
func (t TargetShardKeys) Current(ctx context.Context, ns catalog.Namespace, key targetsharding.Key, ids []bson.RawValue) ([]bson.Raw, error) {
	proj := bson.D{{Key: "_id", Value: 1}}
	for _, f := range key {
		if f.Name != "_id" {
			proj = append(proj, bson.E{Key: f.Name, Value: 1})
		}
	}
	cur, err := t.Router.Database(ns.DB).Collection(ns.Coll).Find(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, options.Find().SetProjection(proj))
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var out []bson.Raw
	for cur.Next(ctx) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	return out, cur.Err()
}

// targetKey is how the target shards one collection, as its writes need
// it.
type targetKey struct {
	key targetsharding.Key
	// idOnly: the key is _id alone ({_id: 1} or {_id: "hashed"}), which
	// every filter holds.
	idOnly bool
	// relaxed: the target is 7.1 or later (the engine knows the major
	// version only, so 8.0 or later), where a retryable write changes a
	// shard-key value with no more than _id in its filter and an upsert
	// without the whole key runs in two phases.
	relaxed bool
}

// targetKeyOf returns how the target shards ns, nil when it does not (or
// the target is no sharded cluster). The dispatcher keeps the answers
// until the next DDL.
func (r *Replayer) targetKeyOf(ctx context.Context, ns catalog.Namespace) (*targetKey, error) {
	if r.o.ShardKeys == nil {
		return nil, nil
	}
	if tk, ok := r.tkeys[ns]; ok {
		return tk, nil
	}
	k, err := r.o.ShardKeys.Key(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("replay: read the target's shard key of %s: %w", ns, err)
	}
	var tk *targetKey
	if k != nil {
		tk = &targetKey{key: k, idOnly: len(k) == 1 && k[0].Name == "_id", relaxed: r.o.TargetMajor >= 8}
	}
	if r.tkeys == nil || len(r.tkeys) >= 10_000 {
		r.tkeys = map[catalog.Namespace]*targetKey{}
	}
	r.tkeys[ns] = tk
	return tk, nil
}

// forgetTargetKeys drops what targetKeyOf read: a DDL command may have
// dropped, created or renamed a collection.
func (r *Replayer) forgetTargetKeys() { clear(r.tkeys) }

// shardKeyed adjusts the writes of one entry for a sharded target before
// they are queued: up to 7.0, an update that changes a key field in a way
// routeWrites cannot follow becomes a re-read of the document from the
// source (a nil Model).
func shardKeyed(tk *targetKey, ws []oplog.Write) []oplog.Write {
	if tk == nil || tk.idOnly || tk.relaxed {
		return ws
	}
	for _, w := range ws {
		m, ok := w.Model.(*mongo.UpdateOneModel)
		if !ok {
			continue
		}
		if _, known := tk.change(m.Update, nil); !known {
			return append(ws[:0], oplog.Write{NS: w.NS, Kind: w.Kind, DocKey: w.DocKey})
		}
	}
	return ws
}

// docState is what routeWrites knows of one document of a command: its
// key on the target (nil when the target has no such document), or that
// an earlier write of the command changed it in a way it cannot follow.
type docState struct {
	key     []bsoncore.Value // the values of the key's fields; null where missing
	present bool
	unknown bool
}

// routeWrites gives the writes of one command (models, built from batch)
// filters that hold the target's whole shard key, as the rules above say.
// It replaces the models it changes, never the items' own; a model it
// sets to nil is not sent (command).
func (r *Replayer) routeWrites(ctx context.Context, batch []item, models []mongo.WriteModel) error {
	tk := batch[0].tk
	if tk == nil || tk.idOnly {
		return nil
	}
	var ids []bson.RawValue
	seen := map[string]bool{}
	for _, m := range models {
		f, upsert := filterOf(m)
		_, replace := m.(*mongo.ReplaceOneModel)
		place := upsert && replace // it places a whole document
		if f == nil || !place && tk.hasKey(f) {
			continue
		}
		id, err := f.LookupErr("_id")
		if err != nil {
			continue
		}
		if k := idKey(id); !seen[k] {
			seen[k] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	r.keyReads.Add(1)
	found, err := r.o.ShardKeys.Current(ctx, batch[0].ns, tk.key, ids)
	if err != nil {
		return fmt.Errorf("read the shard keys of %d documents of %s on the target: %w", len(ids), batch[0].ns, err)
	}
	states := make(map[string]*docState, len(ids))
	for _, id := range ids {
		states[idKey(id)] = &docState{}
	}
	for _, doc := range found {
		id, err := doc.LookupErr("_id")
		if err != nil {
			continue
		}
		if st := states[idKey(id)]; st != nil {
			st.present, st.key = true, tk.valuesIn(doc)
		}
	}
	for i, m := range models {
		f, _ := filterOf(m)
		if f == nil {
			continue
		}
		id, err := f.LookupErr("_id")
		if err != nil {
			continue
		}
		st := states[idKey(id)]
		if st == nil {
			// Not read: its filter holds the whole key, and it places no
			// document.
			continue
		}
		if _, del := m.(*mongo.DeleteOneModel); del && len(batch) == 1 && batch[0].settled && !st.present && !st.unknown {
			// A recheck's or a settle's delete (writeSourceDoc, sent
			// alone) where the target holds no document with the _id:
			// nothing goes. By {_id} alone it would carry no shard key,
			// and the only document it could meet is one another
			// subtask wrote since the read above; the recheck's next
			// read of the source covers it.
			models[i] = nil
			continue
		}
		models[i] = tk.route(m, f, id, st)
	}
	return nil
}

// route returns m with the filter the rules give it, and moves st past m.
func (tk *targetKey) route(m mongo.WriteModel, f bson.Raw, id bson.RawValue, st *docState) mongo.WriteModel {
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		doc, _ := m.Replacement.(bson.Raw)
		written := tk.valuesIn(doc)
		c := *m
		switch {
		case st.unknown && tk.relaxed:
			c.Filter = withOwn(filterDoc(nil, nil, id), f) // found by mongos, on any shard
		case st.present && !st.unknown && !tk.differs(f, st.key):
			c.Filter = withOwn(filterDoc(tk.key, st.key, id), f)
		default:
			// Nothing there, or a document with this _id and another
			// value of a field of the write's own document key (a
			// shard's subtask: another shard's document): filtered on
			// the written key, the upsert meets it on _id (E11000)
			// instead of replacing it (conflict.go).
			c.Filter = withOwn(filterDoc(tk.key, written, id), f)
		}
		if m.Upsert != nil && *m.Upsert || st.present {
			st.present, st.unknown, st.key = true, false, written
		}
		return &c
	case *mongo.UpdateOneModel:
		c := *m
		upsert := m.Upsert != nil && *m.Upsert
		if !st.present && !upsert {
			return &c // matches nothing, wherever it goes
		}
		base := st.key
		if !st.present {
			// An upsert of a missing document inserts the filter's
			// equalities with the update applied: filtered on the key
			// it gets.
			base = make([]bsoncore.Value, len(tk.key))
		}
		next, known := tk.change(m.Update, base)
		if !tk.hasKey(f) && !st.unknown {
			if st.present {
				c.Filter = withOwn(filterDoc(tk.key, st.key, id), f)
			} else {
				c.Filter = withOwn(filterDoc(tk.key, next, id), f)
			}
		}
		st.present, st.key, st.unknown = true, next, st.unknown || !known
		return &c
	case *mongo.DeleteOneModel:
		c := *m
		if !tk.hasKey(f) && st.present && !st.unknown {
			c.Filter = withOwn(filterDoc(tk.key, st.key, id), f)
		}
		st.present, st.unknown, st.key = false, false, nil
		return &c
	}
	return m
}

// differs reports whether filter (a write's own document key) holds a
// field of the key with another value than vals (the document the target
// has): the write is another document's with the same _id.
func (tk *targetKey) differs(filter bson.Raw, vals []bsoncore.Value) bool {
	for i, f := range tk.key {
		if f.Name == "_id" {
			continue
		}
		v, err := filter.LookupErr(f.Name)
		if err != nil {
			continue
		}
		cur := vals[i]
		if cur.Type == 0 {
			cur = bsoncore.Value{Type: bsoncore.TypeNull}
		}
		if bsoncore.Type(v.Type) != cur.Type || !bytes.Equal(v.Value, cur.Data) {
			return true
		}
	}
	return false
}

// withOwn returns built (a filter on the target's key and _id) with the
// other fields of the write's own filter own (a shard's document key
// holds the source's shard-key fields, which the target's key may not):
// so that a write of one shard's document never matches another shard's
// document with the same _id. A filter of _id alone is built as it is.
func withOwn(built, own bson.Raw) bson.Raw {
	els, err := own.Elements()
	if err != nil || len(els) < 2 {
		return built
	}
	var extra []bsoncore.Element
	for _, e := range els {
		if _, err := built.LookupErr(e.Key()); err != nil {
			extra = append(extra, bsoncore.Element(e))
		}
	}
	if len(extra) == 0 {
		return built
	}
	out := append([]byte(nil), built[:len(built)-1]...)
	for _, e := range extra {
		out = append(out, e...)
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return bson.Raw(out)
}

// filterOf returns a write's filter (nil for a model with none, or one not
// in raw BSON), and whether the write upserts (a replacement, or an
// update that replaces a document with a top-level '$' field:
// sink.Replace).
func filterOf(m mongo.WriteModel) (bson.Raw, bool) {
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		f, _ := m.Filter.(bson.Raw)
		return f, m.Upsert != nil && *m.Upsert
	case *mongo.UpdateOneModel:
		f, _ := m.Filter.(bson.Raw)
		return f, m.Upsert != nil && *m.Upsert
	case *mongo.DeleteOneModel:
		f, _ := m.Filter.(bson.Raw)
		return f, false
	}
	return nil, false
}

// hasKey reports whether filter holds an equality on every field of the
// key (as a document key does: dotted fields by their dotted name).
func (tk *targetKey) hasKey(filter bson.Raw) bool {
	for _, f := range tk.key {
		v, err := filter.LookupErr(f.Name)
		if err != nil || v.Type == bson.TypeEmbeddedDocument && isOperatorDoc(v) {
			return false
		}
	}
	return true
}

// isOperatorDoc reports whether v is a document of query operators
// ({$gt: ...}), which is no equality.
func isOperatorDoc(v bson.RawValue) bool {
	first, err := v.Document().IndexErr(0)
	return err == nil && strings.HasPrefix(first.Key(), "$")
}

// valuesIn returns the values of the key's fields in doc, following
// dotted names into embedded documents; null where a field is missing
// (mongos routes a missing field as null).
func (tk *targetKey) valuesIn(doc bson.Raw) []bsoncore.Value {
	out := make([]bsoncore.Value, len(tk.key))
	for i, f := range tk.key {
		if v, err := doc.LookupErr(strings.Split(f.Name, ".")...); err == nil {
			out[i] = bsoncore.Value{Type: bsoncore.Type(v.Type), Data: v.Value}
		}
	}
	return out
}

// change returns the key's values after an update (a document of
// operators or a pipeline, as oplog.Translator builds them) applied to a
// document whose key is base, and whether it could tell: a $set or $unset
// of a key field itself it can; another operator on a key field, a path
// above or below one, or a pipeline stage it does not know, it cannot.
// With a nil base it only says whether it could tell.
func (tk *targetKey) change(update any, base []bsoncore.Value) ([]bsoncore.Value, bool) {
	next := base
	if base != nil {
		next = append([]bsoncore.Value(nil), base...)
	}
	t, data, err := bson.MarshalValue(update)
	if err != nil {
		return next, false
	}
	c := &keyChange{tk: tk, next: next, known: true}
	switch bson.Type(t) {
	case bson.TypeEmbeddedDocument:
		c.ops(data)
	case bson.TypeArray:
		stages, _ := bsoncore.Array(data).Values()
		for _, s := range stages {
			if d, ok := s.DocumentOK(); ok {
				c.ops(d)
			}
		}
	default:
		c.known = false
	}
	return c.next, c.known
}

// keyChange follows the key's values through an update's operators
// (change): next are the values so far (nil: not followed), known
// whether change could tell.
type keyChange struct {
	tk    *targetKey
	next  []bsoncore.Value
	known bool
}

// apply records what one operator does to path p.
func (c *keyChange) apply(op, p string, v bsoncore.Value) {
	for i, f := range c.tk.key {
		switch {
		case p == f.Name && op == "$set":
			if v.Type == bsoncore.TypeEmbeddedDocument {
				if lit, err := bsoncore.Document(v.Data).LookupErr("$literal"); err == nil {
					v = lit
				}
			}
			if c.next != nil {
				c.next[i] = v
			}
		case p == f.Name && op == "$unset":
			if c.next != nil {
				c.next[i] = bsoncore.Value{}
			}
		case p == f.Name || strings.HasPrefix(f.Name, p+".") || strings.HasPrefix(p, f.Name+"."):
			c.known = false
		}
	}
}

// ops records what the operators of doc (or one pipeline stage) do.
func (c *keyChange) ops(doc bsoncore.Document) {
	elems, _ := doc.Elements()
	for _, e := range elems {
		op := e.Key()
		body := e.Value()
		if op == "$replaceWith" {
			// sink.Replace's [{$replaceWith: {$literal: doc}}]: the
			// document becomes doc, its key doc's.
			var lit bsoncore.Document
			if body.Type == bsoncore.TypeEmbeddedDocument {
				if v, err := bsoncore.Document(body.Data).LookupErr("$literal"); err == nil {
					lit, _ = v.DocumentOK()
				}
			}
			if lit != nil {
				c.next = c.tk.valuesIn(bson.Raw(lit))
			} else {
				c.known = false
			}
			continue
		}
		switch body.Type {
		case bsoncore.TypeEmbeddedDocument:
			fields, _ := bsoncore.Document(body.Data).Elements()
			for _, fe := range fields {
				c.apply(op, fe.Key(), fe.Value())
			}
		case bsoncore.TypeArray: // a pipeline's $unset stage: names
			vals, _ := bsoncore.Array(body.Data).Values()
			for _, v := range vals {
				if s, ok := v.StringValueOK(); ok {
					c.apply(op, s, bsoncore.Value{})
				}
			}
		case bsoncore.TypeString: // {$unset: "a"}
			c.apply(op, body.StringValue(), bsoncore.Value{})
		default:
			c.known = false
		}
	}
}

// filterDoc builds {<key fields>: <values>, _id: id}: _id last, as a
// document key has it (and once, when it is a key field).
func filterDoc(key targetsharding.Key, vals []bsoncore.Value, id bson.RawValue) bson.Raw {
	idx, doc := bsoncore.AppendDocumentStart(nil)
	hasID := false
	for i, f := range key {
		v := vals[i]
		if f.Name == "_id" {
			hasID = true
			v = bsoncore.Value{Type: bsoncore.Type(id.Type), Data: id.Value}
		}
		if v.Type == 0 {
			doc = bsoncore.AppendNullElement(doc, f.Name)
			continue
		}
		doc = bsoncore.AppendValueElement(doc, f.Name, v)
	}
	if !hasID {
		doc = bsoncore.AppendValueElement(doc, "_id", bsoncore.Value{Type: bsoncore.Type(id.Type), Data: id.Value})
	}
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	return bson.Raw(doc)
}

// idKey is a map key for an _id value: its type and bytes.
func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

// hashDocument writes the part of a document key that picks a writer:
// its _id. A document keeps its _id when its shard-key value changes (a
// sharded source's document key changes with it), so all its writes
// reach one writer, in order.
func hashDocument(h *maphash.Hash, key bson.Raw) {
	id, err := key.LookupErr("_id")
	if err != nil {
		_, _ = h.Write(key)
		return
	}
	_ = h.WriteByte(byte(id.Type))
	_, _ = h.Write(id.Value)
}
