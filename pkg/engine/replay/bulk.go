package replay

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// cmdKind is the command a write travels in.
type cmdKind uint8

// Command kinds; cmdRefetch is no command but a re-read of the document
// from the source (see refetch).
const (
	cmdInsert cmdKind = iota
	cmdUpdate
	cmdDelete
	cmdRefetch
	// cmdBulkWrite counts bulkWrite commands (MongoDB 8.0+), which carry
	// writes of every kind.
	cmdBulkWrite
	numCmdKinds
)

// String is the kind's name in metrics and status.
func (k cmdKind) String() string {
	switch k {
	case cmdInsert:
		return "insert"
	case cmdUpdate:
		return "update"
	case cmdDelete:
		return "delete"
	case cmdBulkWrite:
		return "bulkWrite"
	}
	return kindRefetch
}

// commandOf returns the command a model travels in.
func commandOf(m mongo.WriteModel) cmdKind {
	switch m.(type) {
	case nil:
		return cmdRefetch
	case *mongo.InsertOneModel:
		return cmdInsert
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		return cmdDelete
	}
	return cmdUpdate
}

// run is one command's writes: one kind, one namespace. An insert run
// goes unordered (it never holds two writes of one document), the others
// ordered.
type run struct {
	ns    catalog.Namespace
	cmd   cmdKind
	items []item
}

// planner reorders a writer's batch into long runs of one command kind
// per namespace. Writes of different documents commute, so a write joins
// the last run of its namespace and kind when that run comes after every
// run holding an earlier write of its document; otherwise it starts a new
// run at the end. Each document's writes thus stay in queue order, in
// runs applied one after the other. A document is its item's hash (the
// writer's partition hash of namespace and document key): two documents
// with one hash are ordered as one, which is only stricter. In a
// namespace with a unique secondary index the hash is the namespace's,
// so its writes keep their queue order across documents and only
// consecutive writes of one kind share a run (a delete of {email: x}
// stays before a later insert of another {email: x}). A planner keeps
// its buffers from one batch to the next.
type planner struct {
	last map[runKey]int32 // the last run of a namespace and kind
	docs map[uint64]int32 // the run of a document's last write
	runs []run
	one  [1]run
}

type runKey struct {
	ns  catalog.Namespace
	cmd cmdKind
}

// plan returns batch's runs in the order they must be applied; they are
// valid until the next call. A batch of one namespace and one kind (the
// common case under a steady load of one kind) is returned as one run
// without copying.
func (p *planner) plan(batch []item) []run {
	if uniform(batch) {
		// Not kept in runs: their buffers are reused below, and batch's
		// belongs to the writer.
		p.one[0] = run{ns: batch[0].ns, cmd: batch[0].cmd, items: batch}
		return p.one[:]
	}
	if p.last == nil {
		p.last, p.docs = map[runKey]int32{}, map[uint64]int32{}
	}
	clear(p.last)
	clear(p.docs)
	n := 0
	for _, it := range batch {
		prev, seen := p.docs[it.hash]
		if !seen {
			prev = -1
		}
		k := runKey{ns: it.ns, cmd: it.cmd}
		at, ok := p.last[k]
		switch {
		case !ok || at < prev || it.cmd == cmdRefetch:
			ok = false
		case it.cmd == cmdInsert && at == prev && !it.serial:
			// An unordered insert run never holds two writes of one
			// document.
			ok = false
		}
		if !ok {
			at = int32(n)
			if n == len(p.runs) {
				p.runs = append(p.runs, run{})
			}
			p.runs[n] = run{ns: it.ns, cmd: it.cmd, items: p.runs[n].items[:0]}
			p.last[k] = at
			n++
		}
		p.runs[at].items = append(p.runs[at].items, it)
		p.docs[it.hash] = at
	}
	return p.runs[:n]
}

// uniform reports whether a batch is one namespace and one command kind
// and can go as one run: not a re-read, and not inserts, which the
// planner checks for a document inserted twice (a user's applyOps may
// insert one _id twice, each an upsert on the source) since an unordered
// command must not hold both.
func uniform(batch []item) bool {
	first := batch[0]
	if len(batch) == 1 {
		return true
	}
	if first.cmd == cmdRefetch || first.cmd == cmdInsert && !first.serial {
		return false
	}
	for i := 1; i < len(batch); i++ {
		if batch[i].ns != first.ns || batch[i].cmd != first.cmd {
			return false
		}
	}
	return true
}

// applyBulk applies a batch's runs as bulkWrite commands (MongoDB 8.0+),
// one for each stretch of runs between re-reads, ordered. When one fails,
// the writes before the failing one are applied and the rest go again
// run by run (applyRun), where every error is handled; a failure that
// names no write sends the whole stretch again so (every write is
// idempotent or falls back to one that is).
func (r *Replayer) applyBulk(ctx context.Context, runs []run) error {
	for len(runs) > 0 {
		if runs[0].cmd == cmdRefetch {
			if err := r.applyRun(ctx, runs[0]); err != nil {
				return err
			}
			runs = runs[1:]
			continue
		}
		n := 0
		for n < len(runs) && runs[n].cmd != cmdRefetch {
			n++
		}
		if err := r.bulkStretch(ctx, runs[:n]); err != nil {
			return err
		}
		runs = runs[n:]
	}
	return nil
}

// bulkStretch sends runs (none a re-read) as one ordered bulkWrite:
// built from the writes' raw documents where it can be (bulkcmd.go),
// through the driver's models otherwise.
func (r *Replayer) bulkStretch(ctx context.Context, runs []run) error {
	if len(runs) == 1 || r.parked.n.Load() > 0 || unconfirmedIn(runs) {
		// A parked document's writes leave the runs in applyRun; an
		// Unconfirmed write needs its command's reply (unconfirmed.go).
		return r.applyRuns(ctx, runs)
	}
	var (
		cmd    *[]byte
		buf    *bulkBuf
		writes []mongo.ClientBulkWrite
		n      int
	)
	if r.rawBulk != nil {
		cmd, buf = getCmdBuf(), bulkBufs.Get().(*bulkBuf)
		defer putCmdBuf(cmd)
		defer bulkBufs.Put(buf)
		var ok bool
		if *cmd, ok = appendBulkWrite((*cmd)[:0], buf, runs, r.o.WriteConcern); !ok {
			cmd = nil
		}
	}
	if cmd != nil {
		for _, rn := range runs {
			n += len(rn.items)
		}
	} else {
		for _, rn := range runs {
			for _, it := range rn.items {
				m, ok := clientModel(it.model)
				if !ok {
					return r.applyRuns(ctx, runs)
				}
				writes = append(writes, mongo.ClientBulkWrite{Database: rn.ns.DB, Collection: rn.ns.Coll, Model: m})
			}
		}
		n = len(writes)
	}
	r.sent(cmdBulkWrite, n)
	started := time.Now()
	actx, cancel := context.WithTimeout(ctx, r.writeTimeout())
	var (
		applied int
		err     error
	)
	if cmd != nil {
		var reply bson.Raw
		if reply, err = r.rawBulk(actx, *cmd); err == nil {
			applied, err = bulkWriteReply(reply, n)
		}
	} else {
		err = r.bulkWrite(actx, writes)
		var cbe mongo.ClientBulkWriteException
		if errors.As(err, &cbe) && cbe.WriteError == nil && len(cbe.WriteConcernErrors) == 0 && len(cbe.WriteErrors) == 1 {
			for k := range cbe.WriteErrors {
				applied = min(max(k, 0), n)
			}
		}
	}
	cancel()
	if r.o.ObserveWrite != nil {
		r.o.ObserveWrite(cmdBulkWrite.String(), time.Since(started))
	}
	if err == nil {
		return nil
	}
	r.log.Debug("a bulkWrite failed; the rest of its writes go again command by command", "applied", applied, "of", n, "err", err)
	for len(runs) > 0 && applied >= len(runs[0].items) {
		applied -= len(runs[0].items)
		runs = runs[1:]
	}
	if len(runs) == 0 {
		return nil
	}
	first := runs[0]
	first.items = first.items[applied:]
	if err := r.applyRun(ctx, first); err != nil {
		return err
	}
	return r.applyRuns(ctx, runs[1:])
}

// cmdBufs hold raw commands between sends.
var cmdBufs = sync.Pool{New: func() any { return new([]byte) }}

func getCmdBuf() *[]byte { return cmdBufs.Get().(*[]byte) }

// putCmdBuf keeps b for the next command unless it grew past a command
// of a few MiB, which is rare and not worth holding.
func putCmdBuf(b *[]byte) {
	if cap(*b) <= 4<<20 {
		cmdBufs.Put(b)
	}
}

// applyRuns applies runs one command each.
func (r *Replayer) applyRuns(ctx context.Context, runs []run) error {
	for _, rn := range runs {
		if err := r.applyRun(ctx, rn); err != nil {
			return err
		}
	}
	return nil
}

// clientModel is m as a bulkWrite command's model; false for a model it
// has none for.
func clientModel(m mongo.WriteModel) (mongo.ClientWriteModel, bool) {
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		return &mongo.ClientInsertOneModel{Document: m.Document}, true
	case *mongo.ReplaceOneModel:
		return &mongo.ClientReplaceOneModel{Filter: m.Filter, Replacement: m.Replacement, Upsert: m.Upsert, Collation: m.Collation, Hint: m.Hint}, true
	case *mongo.UpdateOneModel:
		return &mongo.ClientUpdateOneModel{Filter: m.Filter, Update: m.Update, Upsert: m.Upsert, ArrayFilters: m.ArrayFilters, Collation: m.Collation, Hint: m.Hint}, true
	case *mongo.DeleteOneModel:
		return &mongo.ClientDeleteOneModel{Filter: m.Filter, Collation: m.Collation, Hint: m.Hint}, true
	}
	return nil, false
}
