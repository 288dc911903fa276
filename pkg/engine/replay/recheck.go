package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// Rechecks. A conflict settled from the source (settleConflict) leaves
// the target's document ahead of the subtasks: it is the source's as of
// the read, at, while writes of the _id logged at or below at may still
// come from a lagging shard. A write of another incarnation of the _id
// (another shard-key value) is filtered on its own key and matches
// nothing, but one whose key the document has again does match: an _id
// moved from shard A (sk 44) to shard B and, later, back to sk 44 is
// read with A's old key, and A's own delete of the old document, still
// to come, removes it, with no later write to bring it back.
//
// So the settle leaves a recheck behind: once every subtask on the board
// is settled past at (board.Position.Settled: everything of its shard at
// or below at applied, no transaction begun there still open), no write
// the read reflected is still to come, and the document is read from
// the source again and written as it is there (deleted when it holds
// none). That write is ahead in its turn; when the source's document
// changed between the two reads, one more recheck follows at the second
// read's cluster time, until two reads agree. A recheck holds nothing
// back and waits for nobody: it runs on the holds' loop when the board
// shows its point passed, so it adds no wait to the argument that no
// cycle forms (docs/sharded.md). It is saved with the checkpoint, and a
// subtask counts as caught up only once none is pending
// (HoldStatus.Rechecks).

// recheck is one document to read from the source again once every
// subtask is past at.
type recheck struct {
	ns, src catalog.Namespace
	id      bsoncore.Value
	fields  targetsharding.Key
	at      bson.Timestamp
	// seen is the sha256 of the document the last read returned.
	seen [sha256.Size]byte
}

// key identifies a recheck's document.
func (c *recheck) key() string {
	return c.ns.String() + "\x00" + string(rune(c.id.Type)) + string(c.id.Data)
}

// addRecheck records a recheck of the document doc (with the key fields
// of its write) read from the source with cluster time at; a later one
// of the same document replaces an earlier one.
func (h *holds) addRecheck(it item, doc bson.Raw, at bson.Timestamp) {
	id := it.key.Lookup("_id")
	c := &recheck{ns: it.ns, src: it.src, id: bsoncore.Value{Type: bsoncore.Type(id.Type), Data: id.Value},
		fields: keyFields(it.key), at: at, seen: sha256.Sum256(doc)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rechecks == nil {
		h.rechecks = map[string]*recheck{}
	}
	if old := h.rechecks[c.key()]; old != nil && old.at.After(at) {
		c.at = old.at
	}
	h.rechecks[c.key()] = c
}

// recheckAt returns the point of a recheck after a read with cluster
// time at for a write at ts: at, or, from a source that sends no cluster
// time, the highest entry any subtask has read (a read after it reflects
// every entry read), and never below ts.
func (r *Replayer) recheckAt(ctx context.Context, at, ts bson.Timestamp) bson.Timestamp {
	if at.IsZero() {
		if ps, err := r.o.Board.Positions(ctx); err == nil {
			for _, p := range ps {
				at = maxTS(at, p.Read)
			}
		}
	}
	return maxTS(at, ts)
}

// dueRechecks returns the rechecks every subtask on the board is settled
// past.
func (h *holds) dueRechecks(self string, ps []board.Position) []*recheck {
	h.mu.Lock()
	defer h.mu.Unlock()
	var due []*recheck
	for _, c := range h.rechecks {
		if passed(self, ps, c.at) {
			due = append(due, c)
		}
	}
	return due
}

// passed reports whether every subtask on the board, self included, is
// settled past at.
func passed(self string, ps []board.Position, at bson.Timestamp) bool {
	next := bson.Timestamp{T: at.T, I: at.I + 1}
	if at.I == ^uint32(0) {
		next = bson.Timestamp{T: at.T + 1}
	}
	for _, p := range ps {
		if !p.Settled(self, next) {
			return false
		}
	}
	return true
}

// runRechecks runs the rechecks due on positions ps.
func (r *Replayer) runRechecks(ctx context.Context, ps []board.Position) error {
	for _, c := range r.hs.dueRechecks(r.o.Shard, ps) {
		if err := r.runRecheck(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// runRecheck reads c's document from the source and writes it to the
// target as it is there; it is done when the source's document is the
// one read before, else it goes again at the new read's cluster time.
func (r *Replayer) runRecheck(ctx context.Context, c *recheck) error {
	filter := bsoncore.NewDocumentBuilder().AppendValue("_id", c.id).Build()
	doc, at, err := r.lookup(ctx, c.src, c.at, bson.Raw(filter))
	if err != nil {
		return err
	}
	it := item{ns: c.ns, src: c.src, key: bson.Raw(filter)}
	if it.tk, err = r.targetKeyOf(ctx, c.ns); err != nil {
		return err
	}
	if err := r.writeSourceDoc(ctx, it, bson.Raw(filter), c.fields, doc); err != nil {
		return err
	}
	sum := sha256.Sum256(doc)
	r.hs.mu.Lock()
	defer r.hs.mu.Unlock()
	r.hs.rechecked++
	if r.hs.rechecks[c.key()] != c {
		return nil // a newer settle of the document replaced it
	}
	if bytes.Equal(sum[:], c.seen[:]) {
		delete(r.hs.rechecks, c.key())
		return nil
	}
	c.seen, c.at = sum, maxTS(at, c.at)
	return nil
}

// writeSourceDoc makes the target hold what the source holds with the
// _id of filter ({_id}): its document with that _id deleted (on a target
// sharded by another key, only where it holds one: routeWrites), then doc,
// when not nil, written under its own document key (fields). The writes
// carry its namespace and ts; meeting a document with the _id again,
// they step over.
func (r *Replayer) writeSourceDoc(ctx context.Context, it item, filter bson.Raw, fields targetsharding.Key, doc bson.Raw) error {
	del := it
	del.model = mongo.NewDeleteOneModel().SetFilter(filter)
	ws := []item{del}
	if doc != nil {
		put := it
		put.key = documentKey(fields, doc)
		put.model = sink.Replace(put.key, doc)
		ws = append(ws, put)
	}
	for _, w := range ws {
		w.settled = true // meeting a document again steps over
		w.cmd = commandOf(w.model)
		if err := r.applyOrdered(ctx, []item{w}, true, true); err != nil {
			return err
		}
	}
	return nil
}

// retireRechecks lets a removed shard's subtask, read to its end and
// drained, finish its rechecks before it retires: it publishes itself as
// retired (it holds nobody back any more), and waits, while the holds'
// loop runs them, until none is left.
func (r *Replayer) retireRechecks(ctx context.Context) error {
	if r.o.Board == nil || r.hs.status().Rechecks == 0 {
		return nil
	}
	r.drainedOut.Store(true)
	if err := r.publish(ctx, true); err != nil {
		return err
	}
	for r.hs.status().Rechecks > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.pollInterval()):
		}
	}
	return nil
}

// recheckEntry is a recheck as saved with the checkpoint (see
// stateEntries).
func recheckEntry(c *recheck) bson.Raw {
	fields := bsoncore.NewArrayBuilder()
	for _, f := range c.fields {
		fields.AppendString(f.Name)
	}
	o := bsoncore.NewDocumentBuilder().AppendString(holdField, holdRecheck).AppendString("target", c.ns.String()).
		AppendValue("_id", c.id).AppendArray("fields", fields.Build()).AppendBinary("seen", 0, c.seen[:])
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendTimestamp("ts", c.at.T, c.at.I).AppendString("op", "n").
		AppendString("ns", c.src.String()).AppendDocument("o", o.Build()).Build())
}

// recoverRecheck takes back a recheck saved by recheckEntry.
func (h *holds) recoverRecheck(raw bson.Raw, at bson.Timestamp) error {
	o, ok := raw.Lookup("o").DocumentOK()
	src, ok2 := raw.Lookup("ns").StringValueOK()
	target, ok3 := o.Lookup("target").StringValueOK()
	id, err := o.LookupErr("_id")
	arr, ok4 := o.Lookup("fields").ArrayOK()
	_, seen, ok5 := o.Lookup("seen").BinaryOK()
	if !ok || !ok2 || !ok3 || err != nil || !ok4 || !ok5 || len(seen) != sha256.Size {
		return fmt.Errorf("replay: a recheck saved with the checkpoint is malformed: %s", raw)
	}
	vals, _ := arr.Values()
	c := &recheck{ns: catalog.ParseNamespace(target), src: catalog.ParseNamespace(src),
		id: bsoncore.Value{Type: bsoncore.Type(id.Type), Data: id.Value}, at: at}
	for _, v := range vals {
		c.fields = append(c.fields, targetsharding.KeyField{Name: v.StringValue()})
	}
	copy(c.seen[:], seen)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rechecks == nil {
		h.rechecks = map[string]*recheck{}
	}
	h.rechecks[c.key()] = c
	return nil
}
