package replay

import (
	"context"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
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
// delete still to come. The source tells: it is read by the write's whole
// document key. When it holds that document now, the other shard's X on
// the target is an older one whose later writes, filtered on its key,
// match nothing once it is gone: it is deleted and the document is
// written as the source has it, later entries applying on top as they do
// over the copy. When it does not, the other document is newer and the
// write is stepped over. Without a source to read (a test's replayer),
// the write is stepped over.
func (r *Replayer) settleConflict(ctx context.Context, it item) error {
	if it.settled || r.o.Lookup == nil && r.o.Source == nil {
		r.stepOver(it)
		return nil
	}
	doc, err := r.lookup(ctx, it)
	if err != nil {
		return err
	}
	if doc == nil {
		r.stepOver(it)
		return nil
	}
	id := it.key.Lookup("_id")
	filter, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	del, put := it, it
	del.model = mongo.NewDeleteOneModel().SetFilter(bson.Raw(filter))
	put.model = sink.Replace(it.key, doc)
	put.settled = true // meeting a document again steps over
	for _, w := range []item{del, put} {
		w.cmd = commandOf(w.model)
		if err := r.applyOrdered(ctx, []item{w}, true, true); err != nil {
			return err
		}
	}
	r.hs.mu.Lock()
	r.hs.reread++
	r.hs.mu.Unlock()
	r.log.Info("a write meets an older document with its _id and another shard-key value, whose delete on another shard is still to come "+
		"(the _id moved to another shard, the two writes logged out of order); the source holds this write's document: the older one is removed and the document written as the source has it",
		"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
	return nil
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
