package replay

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// staleUpsert reports whether a duplicate key error is an upsert filtered
// on _id and more (a shard's document key: the shard key and _id) that
// matched nothing and met, on _id, a document with the same _id and
// another shard-key value. On a shard's subtask that document is newer
// than the write: every earlier write of the document, on any shard, is
// applied before it (docs/sharded.md), so it comes from a later write.
// That is the write applied again after a restart, past a later change
// of the document's shard key that was already applied; the later
// entries, read again too, bring the document where the source has it.
// The write is stepped over (stepOver).
func staleUpsert(it item, we mongo.BulkWriteError) bool {
	f, upsert := filterOf(it.model)
	if !upsert || f == nil {
		return false
	}
	if els, err := f.Elements(); err != nil || len(els) < 2 {
		return false
	}
	if _, err := f.LookupErr("_id"); err != nil {
		return false
	}
	return onID(we)
}

// onID reports whether a duplicate key error is on the _id index.
func onID(we mongo.BulkWriteError) bool {
	if kp, err := we.Details.LookupErr("keyPattern"); err == nil {
		if doc, ok := kp.DocumentOK(); ok {
			els, err := doc.Elements()
			return err == nil && len(els) == 1 && els[0].Key() == "_id"
		}
	}
	return strings.Contains(we.Message, "index: _id_ ")
}

// stepOver counts and logs a stale upsert stepped over. Up to the
// highest position an earlier run may have applied it is a write applied
// again; past it, another shard holds a document with the same _id and
// another shard-key value (MongoDB enforces _id uniqueness per shard
// only): reported with the namespace and _id.
func (r *Replayer) stepOver(it item) {
	r.mu.Lock()
	r.staleUpserts++
	again := !it.ts.After(r.reapplied)
	r.mu.Unlock()
	id := it.key.Lookup("_id")
	if again {
		r.log.Info("a write applied again after a restart meets a newer version of its document (its shard key changed since); stepped over",
			"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
		return
	}
	r.log.Warn("an upsert meets a document with the same _id and another shard-key value: "+
		"two documents of one collection share an _id on different shards of the source (an _id reused across shards), and the target keeps one; "+
		"stepped over, check that document",
		"shard", r.o.Shard, "ns", it.ns.String(), "_id", id.String(), "ts", it.ts)
}
