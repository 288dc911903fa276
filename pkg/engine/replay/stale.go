package replay

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
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
