package replay

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Updates a source may have logged without writing them
// (oplog.Write.Unconfirmed). FerretDB v1 logs an update once its write
// returns, whether or not the write found the document, so an update
// racing a delete of its document can be logged after that delete with
// the whole document it meant to write. Replayed as read (a replacement
// upsert), it would bring back a document the source no longer has.
//
// Such a write is sent as before, an upsert; what its command's reply
// says decides the rest:
//
//   - an update command's upserted array names the writes that found no
//     document on the target and inserted one. The target lacked the
//     document, so the entry is either such an update or one whose
//     document a later entry deletes (replayed again after a restart, or
//     deleted before the copy read it). Either way the document is
//     re-read from the source and written as the source holds it now,
//     or deleted (refetch): later entries then apply on top, as over the
//     full copy.
//   - a stretch of replacements applied as a delete and an insert
//     (reinsert.go) deletes one statement per document: when the delete
//     command removed fewer documents than it names, some were not on
//     the target, and which is not told, so every document of the
//     stretch is re-read from the source instead of inserted.
//
// The re-read is the one a hole in the oplog costs (late): a find by _id,
// counted with the other re-reads (Status.Applied["refetch"]).
// It comes only where the target lacked the document, which a steady
// replay meets only with such an update. Not done where the replayer
// cannot read a reply (Options.Apply, ApplyAt: the tests' appliers) nor
// for a sharded source's subtask (Options.ShardMember), whose re-reads go
// through its conflict rule (conflict.go).

// reply is what a write command's reply tells beyond its errors, where
// the sender can read it (known).
type reply struct {
	known bool
	// upserted are the indexes of the writes that inserted their
	// document (an update command).
	upserted []int
	// n is the number of documents a delete command removed.
	n int64
}

// replyOf reads a raw command's reply.
func replyOf(cmd cmdKind, raw bson.Raw) reply {
	if raw == nil {
		return reply{}
	}
	rep := reply{known: true}
	switch cmd {
	case cmdUpdate:
		rep.upserted = sink.Upserted(raw)
	case cmdDelete:
		rep.n, _ = raw.Lookup("n").AsInt64OK()
	}
	return rep
}

// bulkReply reads what the driver's BulkWrite returns.
func bulkReply(res *mongo.BulkWriteResult) reply {
	if res == nil {
		return reply{}
	}
	rep := reply{known: true, n: res.DeletedCount}
	for i := range res.UpsertedIDs {
		rep.upserted = append(rep.upserted, int(i))
	}
	return rep
}

// confirm re-reads from the source the documents that Unconfirmed writes
// of sent inserted (rep.upserted), in their order.
func (r *Replayer) confirm(ctx context.Context, sent []item, rep reply) error {
	for _, k := range rep.upserted {
		if k < 0 || k >= len(sent) || !sent[k].unconfirmed {
			continue
		}
		r.log.Debug("an update found no document on the target (the source may have logged it after the document's delete); the document is re-read from the source",
			"ns", sent[k].ns.String(), "ts", sent[k].ts)
		if err := r.refetch(ctx, sent[k]); err != nil {
			return err
		}
	}
	return nil
}

// anyUnconfirmed reports whether batch holds an Unconfirmed write.
func anyUnconfirmed(batch []item) bool {
	for _, it := range batch {
		if it.unconfirmed {
			return true
		}
	}
	return false
}

// unconfirmedIn reports whether runs hold an Unconfirmed write.
func unconfirmedIn(runs []run) bool {
	for _, rn := range runs {
		if anyUnconfirmed(rn.items) {
			return true
		}
	}
	return false
}
