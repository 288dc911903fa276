// Package oplog turns raw oplog entries into idempotent target writes.
// Entry and Parse read one raw entry (Kind, Command and the DDL classes);
// Filter.Skip says which entries change nothing on the target; Assembler unwraps
// applyOps and buffers partialTxn chains and prepared transactions into
// Units, with Checkpoint/Recover for its buffer; Translate turns an entry
// into Writes (upserting replaces, $v:1 operators, $v:2 diffs as ordered
// $set/$unset/$push updates, deletes) or a DDL barrier. EventToEntry turns
// a change event back into the entry it stands for (event.go; its update
// descriptions become $v:2 diffs through a path tree in event_update.go,
// the inverse of diff.go), and EventGroup groups a transaction's events
// into one applyOps entry.
//
// The replayer's loop, per shard:
//
//	e, err := oplog.Parse(raw)               // raw: a copy of cursor.Current
//	// advance the reader's watermark to e.TS() (no-ops included)
//	if skip, _ := filter.Skip(e); skip { continue } // filter: &oplog.Filter{...}
//	unit, ok, err := assembler.Add(e)
//	if !ok { continue }                      // buffered: an open transaction
//	for _, op := range unit.Ops {
//		if skip, _ := filter.Skip(op); skip { continue }
//		writes, err := oplog.Translate(op)   // DDL: a barrier; else partition by DocKey
//	}
//
// Hot paths work on the raw bytes (bson.Raw and bsoncore) and never decode
// a document into a map.
package oplog
