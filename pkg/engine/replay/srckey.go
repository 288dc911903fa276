package replay

import (
	"context"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// The document key of a shard's insert. mongod logs it in an insert's o2
// from the 5.3 binary on, whatever the FCV (OpObserverImpl::onInserts has
// no FCV check); before that (4.4, 5.0, or a 5.0 member during a rolling
// upgrade) an insert is {op: "i", o: <document>} and its key would be
// {_id} alone. A shard's subtask filters every write on its whole
// document key (conflict.go), so an insert without o2 gets it from the
// collection's shard-key pattern as the source's config.collections has
// it (Options.SourceShardKeys), read the first time it is needed and
// again after the DDL or sharding operation (shardCollection,
// refineCollectionShardKey, reshardCollection) of its namespace that a
// subtask reads. docs/oplog-shapes.md, "Document keys", has the shapes.

// sourceKeyOf returns the source's shard-key pattern of ns, nil when
// ns is not sharded or the pattern cannot be asked for.
func (r *Replayer) sourceKeyOf(ctx context.Context, ns catalog.Namespace) (targetsharding.Key, error) {
	if r.o.SourceShardKeys == nil {
		return nil, nil
	}
	if k, ok := r.skeys[ns]; ok {
		return k, nil
	}
	k, err := r.o.SourceShardKeys.Key(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("replay: read the source's shard key of %s (an insert logged without its document key): %w", ns, err)
	}
	if r.skeys == nil || len(r.skeys) >= 10_000 {
		r.skeys = map[catalog.Namespace]targetsharding.Key{}
	}
	r.skeys[ns] = k
	return k, nil
}

// forgetSourceKey drops the pattern read for ns (every namespace when ns
// is zero): a DDL command or a sharding operation may have changed it.
func (r *Replayer) forgetSourceKey(ns catalog.Namespace) {
	if ns == (catalog.Namespace{}) {
		clear(r.skeys)
		return
	}
	delete(r.skeys, ns)
}

// insertKey returns the document key of a shard's insert: its o2 when
// logged, else the shard-key fields of the document, in the pattern's
// order, and _id, as mongod builds a document key
// (DocumentKey::getShardKeyAndId): a dotted field by its dotted name, a
// missing field left out, _id last unless the pattern names it.
func (r *Replayer) insertKey(ctx context.Context, op oplog.Entry, src catalog.Namespace, key bson.Raw) (bson.Raw, error) {
	if !r.o.ShardMember || len(op.O2()) > 0 || op.Kind() != oplog.Insert {
		return key, nil
	}
	k, err := r.sourceKeyOf(ctx, src)
	if err != nil || len(k) == 0 || len(k) == 1 && k[0].Name == "_id" {
		return key, err
	}
	return documentKey(k, op.O()), nil
}

// documentKey builds doc's document key under shard key k.
func documentKey(k targetsharding.Key, doc bson.Raw) bson.Raw {
	idx, out := bsoncore.AppendDocumentStart(nil)
	hasID := false
	for _, f := range k {
		if f.Name == "_id" {
			hasID = true
		}
		v, err := doc.LookupErr(strings.Split(f.Name, ".")...)
		if err != nil {
			continue
		}
		out = bsoncore.AppendValueElement(out, f.Name, bsoncore.Value{Type: bsoncore.Type(v.Type), Data: v.Value})
	}
	if !hasID {
		if v, err := doc.LookupErr("_id"); err == nil {
			out = bsoncore.AppendValueElement(out, "_id", bsoncore.Value{Type: bsoncore.Type(v.Type), Data: v.Value})
		}
	}
	out, _ = bsoncore.AppendDocumentEnd(out, idx)
	return bson.Raw(out)
}

// keyed returns a shard's insert filtered on its whole document key
// (key): an upsert that never replaces another shard's document with
// the same _id and another shard-key value, but meets it on the _id
// index (conflict.go). Other writes carry their document key already.
func keyed(w oplog.Write, key bson.Raw) oplog.Write {
	if w.Kind != oplog.Insert || len(key) == 0 {
		return w
	}
	w.DocKey = key
	switch m := w.Model.(type) {
	case *mongo.ReplaceOneModel:
		c := *m
		c.Filter = key
		w.Model = &c
	case *mongo.UpdateOneModel: // a document with a top-level '$' field (sink.Replace)
		c := *m
		c.Filter = key
		w.Model = &c
	}
	return w
}
