package replay

import (
	"context"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// onID reports whether a duplicate key error is on the _id index: by its
// keyPattern, else by the index its message names. A server that names
// none (FerretDB v1: "E11000 duplicate key error collection: db.coll")
// is taken at its word for an upsert filtered on a document key
// (conflictOnID): the write waits for the other subtasks and goes again
// before it is stepped over, and a unique secondary index met that way
// is waited on the same way.
func onID(we mongo.BulkWriteError) bool {
	if kp, err := we.Details.LookupErr("keyPattern"); err == nil {
		if doc, ok := kp.DocumentOK(); ok {
			els, err := doc.Elements()
			return err == nil && len(els) == 1 && els[0].Key() == "_id"
		}
	}
	if strings.Contains(we.Message, "index: ") {
		return strings.Contains(we.Message, "index: _id_ ")
	}
	return true
}

// settleConflict decides a write that still meets a document with its
// _id and another shard-key value after waiting for the other subtasks
// (conflict.go). Cluster time orders two shards' writes only when a
// message carries it from one to the other (a driver sends the newest
// $clusterTime its own client has seen): an application that deletes X
// on one shard and, from another client through another router, inserts
// X with another shard-key value may log the insert at a ts below the
// delete's, and the other shard's X is then older than the write, its
// delete still to come. Neither write's key tells which of the two the
// source keeps: the new document's shard key may change in place after
// its insert, so a read by the write's own key would miss it. The source
// is read by _id alone (through the router, every shard), and the target
// is made to hold what it holds now:
//   - it holds a document with that _id: the target's one is deleted and
//     the source's written under its own document key. Later entries
//     apply on top of it, as they do over the copy: a write of the
//     document the source no longer has, filtered on that document's
//     key, matches nothing; a write of the kept one is already in it.
//     One of an earlier incarnation whose key the document has again
//     may still remove it: the recheck left behind (recheck.go) writes
//     it again once every subtask is past the read.
//   - it holds none: the _id is gone, and the target's document is
//     removed by its own shard's delete still to come; the write is
//     stepped over.
//
// Without a source to read (a test's replayer), the write is stepped
// over.
func (r *Replayer) settleConflict(ctx context.Context, it item) error {
	if it.settled || r.o.Lookup == nil && r.o.Source == nil {
		r.stepOver(it)
		return nil
	}
	id := it.key.Lookup("_id")
	filter, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	doc, at, err := r.lookup(ctx, it.src, it.ts, filter)
	if err != nil {
		return err
	}
	if doc == nil {
		r.stepOver(it)
		return nil
	}
	if err := r.writeSourceDoc(ctx, it, filter, keyFields(it.key), doc); err != nil {
		return err
	}
	if r.o.Board != nil {
		r.hs.addRecheck(it, doc, r.recheckAt(ctx, at, it.ts))
	}
	r.hs.mu.Lock()
	r.hs.reread++
	r.hs.mu.Unlock()
	r.log.Info("a write meets another document with its _id and another shard-key value after waiting for the other shards "+
		"(the _id moved to another shard, the two writes logged out of order); the target's document is replaced by the one the source holds now",
		"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
	return nil
}

// keyFields returns the fields of a document key, in its order: the
// shard-key pattern the key was built under, _id included.
func keyFields(key bson.Raw) targetsharding.Key {
	els, _ := key.Elements()
	k := make(targetsharding.Key, 0, len(els))
	for _, e := range els {
		k = append(k, targetsharding.KeyField{Name: e.Key()})
	}
	return k
}

// stepOver counts and logs a write stepped over: after waiting for the
// other subtasks it still meets a document with its _id and another
// shard-key value, which is newer (conflict.go). Up to the highest
// position an earlier run may have applied, it is a write applied again
// past a later shard-key change; past it, the source held the _id on two
// shards one after the other (an _id moved to another shard by the
// application), logged with the namespace and _id.
func (r *Replayer) stepOver(it item) {
	r.mu.Lock()
	r.staleUpserts++
	again := !it.ts.After(r.reapplied)
	r.mu.Unlock()
	r.hs.mu.Lock()
	r.hs.steppedOver++
	r.hs.mu.Unlock()
	id := it.key.Lookup("_id")
	if again {
		r.log.Info("a write applied again after a restart meets a newer version of its document (its shard key changed since); stepped over",
			"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
		return
	}
	r.log.Info("a write meets a newer document with its _id and another shard-key value, written on another shard after it "+
		"(the _id moved to another shard); stepped over",
		"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
}

// met counts a write that met a document with its _id.
func (h *holds) met() {
	h.mu.Lock()
	h.conflictsMet++
	h.mu.Unlock()
}
