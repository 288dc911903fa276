package replay

import (
	"bytes"
	"context"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// Replacements applied as one delete and one insert
// (Options.ReinsertReplacements). A multi-document update on a source
// that logs updates as whole documents (FerretDB: one updateMany of
// 1,057 documents is 1,057 entries {$set: <the whole document>}) reaches
// a writer as a run of replacement upserts by _id. FerretDB v1 spends
// tens of milliseconds on each update statement however the statements
// are batched, while one delete command of a run's documents by _id
// and one insert command of their new versions cost
// a few milliseconds a document (docs/benchmarks.md, "One updateMany
// replayed onto FerretDB"; the deletes go one statement per document
// since: see reinsertRun). A stretch of such a run (at least
// minReinsert replacement upserts by _id alone) is applied so:
//
//   - the delete goes first, through applyBatch (retried like any
//     delete); the insert after it, through applyInserts (the inserts'
//     own batching: a document that meets a duplicate key is replaced by
//     its key, which is applyBatch's classification as before);
//   - a document written twice in the stretch is inserted in its last
//     version: every write of the stretch replaces the whole document,
//     so the last one is what sequential writes leave;
//   - the stretch's writes are marked done only when both commands are
//     acknowledged (writer.finish after applyRun), so the checkpoint
//     never passes a replacement whose insert is not on the target; an
//     error in between leaves the stretch's entries above the saved
//     position, and a restart applies them again (both halves are
//     idempotent together);
//   - what is not such a stretch (operator updates, a replacement
//     without its _id or by a fuller key) goes through applyBatch as
//     before, in order: stretches and the rest keep the run's order, and
//     each document's writes are in one run.
//
// Not used where a document may be seen by its key by another writer or
// subtask, or where a delete and insert are not a replacement: a
// namespace with a unique secondary index (its writes are serial, and an
// insert there could meet a key the deletes had not freed yet), a
// subtask of a sharded source (Options.ShardMember: conflicts are
// resolved per write), a sharded target (Options.ShardKeys), system
// collections.

// minReinsert is the shortest stretch applied as a delete and an insert;
// a single replacement goes as one update statement.
const minReinsert = 2

// applyUpdates applies an update run: its stretches of replacements by
// _id as deletes and inserts when the target wants them so, the rest as
// ordered update commands.
func (r *Replayer) applyUpdates(ctx context.Context, batch []item) error {
	if !r.reinsert {
		return r.applyBatch(ctx, batch)
	}
	for len(batch) > 0 {
		n := 0
		for n < len(batch) && reinsertable(batch[n]) {
			n++
		}
		if n >= minReinsert {
			if err := r.reinsertRun(ctx, batch[:n]); err != nil {
				return err
			}
			batch = batch[n:]
			continue
		}
		m := n
		for m < len(batch) && !startsStretch(batch[m:]) {
			m++
		}
		if err := r.applyBatch(ctx, batch[:m]); err != nil {
			return err
		}
		batch = batch[m:]
	}
	return nil
}

// startsStretch reports whether batch begins with minReinsert
// reinsertable writes.
func startsStretch(batch []item) bool {
	if len(batch) < minReinsert {
		return false
	}
	for _, it := range batch[:minReinsert] {
		if !reinsertable(it) {
			return false
		}
	}
	return true
}

// reinsertable reports whether it is a replacement upsert by {_id} alone
// whose document carries that _id, in a namespace where a delete and an
// insert may stand for it.
func reinsertable(it item) bool {
	if it.serial || it.parked || strings.HasPrefix(it.ns.Coll, "system.") {
		return false
	}
	_, _, ok := replacementID(it.model)
	return ok
}

// replacementID returns the _id and the document of a replacement upsert
// whose filter is {_id: v} with v not a regular expression (as a filter
// it matches by pattern) and whose document's _id is v, byte for byte.
func replacementID(m mongo.WriteModel) (bsoncore.Value, []byte, bool) {
	rm, ok := m.(*mongo.ReplaceOneModel)
	if !ok || rm.Upsert == nil || !*rm.Upsert || rm.Collation != nil || rm.Hint != nil || rm.Sort != nil {
		return bsoncore.Value{}, nil, false
	}
	f, ok1 := sink.RawDocument(rm.Filter)
	doc, ok2 := sink.RawDocument(rm.Replacement)
	if !ok1 || !ok2 {
		return bsoncore.Value{}, nil, false
	}
	elems, err := bsoncore.Document(f).Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != "_id" {
		return bsoncore.Value{}, nil, false
	}
	id := elems[0].Value()
	if id.Type == bsoncore.TypeRegex {
		return bsoncore.Value{}, nil, false
	}
	did, err := bsoncore.Document(doc).LookupErr("_id")
	if err != nil || did.Type != id.Type || !bytes.Equal(did.Data, id.Data) {
		return bsoncore.Value{}, nil, false
	}
	return id, doc, true
}

// reinsertRun applies a stretch of replacements by _id as one delete
// command, a statement {_id: v} per document, and one insert command of
// their last versions. One statement per document, not one
// {_id: {$in: [...]}}: FerretDB finds a document by {_id: v} through its
// storage's query (pushdown), but evaluates $in on every document of the
// collection; on 50,000 documents of 1.1 KB a delete by $in took 4.0-5.3
// s whatever its length (1 or 5 _ids), a delete by {_id} 0.4-0.6 s
// (docs/benchmarks.md, "Where the time goes").
func (r *Replayer) reinsertRun(ctx context.Context, batch []item) error {
	at := make(map[string]int, len(batch)) // _id (type and bytes) -> index in inserts
	inserts := make([]item, 0, len(batch))
	deletes := make([]item, 0, len(batch))
	for _, it := range batch {
		id, doc, _ := replacementID(it.model)
		x := it
		x.model, x.cmd = &mongo.InsertOneModel{Document: bson.Raw(doc)}, cmdInsert
		k := string(append([]byte{byte(id.Type)}, id.Data...))
		if i, ok := at[k]; ok {
			inserts[i] = x
			continue
		}
		at[k] = len(inserts)
		inserts = append(inserts, x)
		del := it
		del.model, del.cmd = mongo.NewDeleteOneModel().SetFilter(bson.Raw(bsoncore.NewDocumentBuilder().AppendValue("_id", id).Build())), cmdDelete
		deletes = append(deletes, del)
	}
	removed, err := r.applyOrderedN(ctx, deletes, false, false)
	if err != nil {
		return err
	}
	if removed.known && removed.n < int64(len(deletes)) && anyUnconfirmed(inserts) {
		// Some documents were not on the target, and the reply does not
		// say which: each is written as the source holds it now
		// (unconfirmed.go).
		r.log.Debug("a run of whole-document updates found documents missing on the target; they are re-read from the source",
			"ns", batch[0].ns.String(), "documents", len(inserts), "found", removed.n)
		for _, it := range inserts {
			if err := r.refetch(ctx, it); err != nil {
				return err
			}
		}
		return nil
	}
	return r.applyInserts(ctx, inserts)
}
