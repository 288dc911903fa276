package replay

import (
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// The participants of a multi-shard transaction, as its coordinator logs
// them (s/transaction_coordinator_util.cpp, docs/oplog-shapes.md): the
// coordinator, one of the participants, upserts into its own
// config.transaction_coordinators {_id: {lsid, txnNumber}, participants:
// [shard ids]} before it sends the prepares, replaces it with the same
// plus decision: {decision: "commit", commitTimestamp} once every
// participant voted, sends the commits, then deletes it. The subtask of
// the coordinator shard reads the commit decision and publishes it
// (board.Position.Decided); a participant's commit waits only for the
// shards it names (waitCommit). The decision is logged before any
// commit: a participant at its commit entry whose decision is not on the
// board yet (the coordinator's subtask lags) waits for every subtask, as
// safe as the subset and slower.

// collCoordinators is the config collection of the coordinator's
// documents.
const collCoordinators = "transaction_coordinators"

// decided is a commit decision read and the ts of its entry.
type decided struct {
	d  board.Decision
	ts bson.Timestamp
}

// coordinator notes a config.transaction_coordinators write that carries
// a commit decision (an insert or a replacement); other writes of it, an
// abort decision among them, change nothing.
func (h *holds) coordinator(e oplog.Entry, ts bson.Timestamp) {
	if e.Kind() != oplog.Insert && e.Kind() != oplog.Update {
		return
	}
	d, ok := decisionOf(e.O())
	if !ok {
		return
	}
	h.decide(d, ts)
}

// decide records decision d read at ts (once: read again after a restart
// it changes nothing).
func (h *holds) decide(d board.Decision, ts bson.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.decided[d.Txn]; ok {
		return
	}
	if h.decided == nil {
		h.decided = map[string]decided{}
	}
	h.decided[d.Txn] = decided{d: d, ts: ts}
}

// decisionOf reads a coordinator's document with a commit decision.
func decisionOf(doc bson.Raw) (board.Decision, bool) {
	if s, ok := doc.Lookup("decision", "decision").StringValueOK(); !ok || s != "commit" {
		return board.Decision{}, false
	}
	t, i, ok := doc.Lookup("decision", "commitTimestamp").TimestampOK()
	if !ok {
		return board.Decision{}, false
	}
	arr, ok := doc.Lookup("participants").ArrayOK()
	if !ok {
		return board.Decision{}, false
	}
	vals, err := arr.Values()
	if err != nil || len(vals) == 0 {
		return board.Decision{}, false
	}
	d := board.Decision{Commit: bson.Timestamp{T: t, I: i}}
	for _, v := range vals {
		name, ok := v.StringValueOK()
		if !ok {
			return board.Decision{}, false
		}
		d.Participants = append(d.Participants, name)
	}
	id, ok := doc.Lookup("_id").DocumentOK()
	if !ok {
		return board.Decision{}, false
	}
	if d.Txn, ok = coordinatedTxn(id); !ok {
		return board.Decision{}, false
	}
	return d, true
}

// coordinatedTxn returns the oplog.TxnID of the transaction a
// coordinator's _id ({lsid, txnNumber}, from 6.0 maybe txnRetryCounter)
// names: the id its participants' prepare and commit entries give.
func coordinatedTxn(id bson.Raw) (string, bool) {
	lsid, err := id.LookupErr("lsid")
	if err != nil || lsid.Type != bson.TypeEmbeddedDocument {
		return "", false
	}
	n, err := id.LookupErr("txnNumber")
	if err != nil {
		return "", false
	}
	raw := bsoncore.BuildDocumentFromElements(nil,
		bsoncore.AppendTimestampElement(nil, "ts", 0, 1),
		bsoncore.AppendStringElement(nil, "op", "n"),
		bsoncore.AppendStringElement(nil, "ns", ""),
		bsoncore.AppendDocumentElement(nil, "o", bsoncore.NewDocumentBuilder().Build()),
		bsoncore.AppendValueElement(nil, "lsid", bsoncore.Value{Type: bsoncore.Type(lsid.Type), Data: lsid.Value}),
		bsoncore.AppendValueElement(nil, "txnNumber", bsoncore.Value{Type: bsoncore.Type(n.Type), Data: n.Value}))
	e, err := oplog.Parse(bson.Raw(raw))
	if err != nil {
		return "", false
	}
	return oplog.TxnID(e)
}

// decisions returns the decisions to publish, by transaction.
func (h *holds) decisions() []board.Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.decided) == 0 {
		return nil
	}
	out := make([]board.Decision, 0, len(h.decided))
	for _, d := range h.decided {
		out = append(out, d.d)
	}
	slices.SortFunc(out, func(x, y board.Decision) int { return strings.Compare(x.Txn, y.Txn) })
	return out
}

// dropDecided forgets, with h.mu held, the decisions no participant
// waits on any more: every other participant is retired or drained, or
// its durable position is at or past the commit timestamp without the
// transaction prepared (its part is applied, or it had none to log: a
// participant that only read). A participant with no position on the
// board never finds the decision useful (commitWaitsFor). Forgetting
// one too early costs a wait for every subtask, never a wrong order.
func (h *holds) dropDecided(self string, ps []board.Position) {
	for txn, d := range h.decided {
		if passedCommit(self, ps, d.d) {
			delete(h.decided, txn)
		}
	}
}

func passedCommit(self string, ps []board.Position, d board.Decision) bool {
	for _, name := range d.Participants {
		if name == self {
			continue
		}
		i := slices.IndexFunc(ps, func(p board.Position) bool { return p.Shard == name })
		if i < 0 {
			continue
		}
		p := ps[i]
		if !p.Retired && !p.Drained && (p.Applied.Before(d.Commit) || slices.Contains(p.Prepared, d.Txn)) {
			return false
		}
	}
	return true
}

// commitWaitsFor returns the positions a part of transaction txn
// committing at cts waits for, and whether they are its participants'
// alone: the shards a decision published (or read by this subtask,
// own) for txn at cts names, when they include self and each has a
// position on the board. Otherwise, the coordinator's subtask has not
// read its decision yet or the names are not the board's, it is every
// position: never fewer than the participants.
func commitWaitsFor(self string, ps []board.Position, own []board.Decision, txn string, cts bson.Timestamp) ([]board.Position, bool) {
	d, ok := findDecision(ps, own, txn, cts)
	if !ok || !slices.Contains(d.Participants, self) {
		return ps, false
	}
	out := make([]board.Position, 0, len(d.Participants))
	for _, name := range d.Participants {
		i := slices.IndexFunc(ps, func(p board.Position) bool { return p.Shard == name })
		if i < 0 {
			return ps, false
		}
		out = append(out, ps[i])
	}
	return out, true
}

// findDecision finds the commit decision of txn at cts.
func findDecision(ps []board.Position, own []board.Decision, txn string, cts bson.Timestamp) (board.Decision, bool) {
	match := func(d board.Decision) bool { return d.Txn == txn && d.Commit.Equal(cts) }
	if i := slices.IndexFunc(own, match); i >= 0 {
		return own[i], true
	}
	for _, p := range ps {
		if i := slices.IndexFunc(p.Decided, match); i >= 0 {
			return p.Decided[i], true
		}
	}
	return board.Decision{}, false
}

// decidedEntry is a decision as saved with the checkpoint (see
// holdField), at the ts of the entry it was read from.
func decidedEntry(d decided) bson.Raw {
	parts := bsoncore.NewArrayBuilder()
	for _, name := range d.d.Participants {
		parts.AppendString(name)
	}
	o := bsoncore.NewDocumentBuilder().AppendString(holdField, holdDecided).AppendString("txn", d.d.Txn).
		AppendTimestamp("commit", d.d.Commit.T, d.d.Commit.I).AppendArray("participants", parts.Build())
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendTimestamp("ts", d.ts.T, d.ts.I).AppendString("op", "n").
		AppendString("ns", "").AppendDocument("o", o.Build()).Build())
}

// recoverDecided takes back a decision saved by decidedEntry.
func (h *holds) recoverDecided(raw bson.Raw, ts bson.Timestamp) {
	o, ok := raw.Lookup("o").DocumentOK()
	if !ok {
		return
	}
	d := board.Decision{}
	d.Txn, _ = o.Lookup("txn").StringValueOK()
	t, i, _ := o.Lookup("commit").TimestampOK()
	d.Commit = bson.Timestamp{T: t, I: i}
	if arr, ok := o.Lookup("participants").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			if name, ok := v.StringValueOK(); ok {
				d.Participants = append(d.Participants, name)
			}
		}
	}
	if d.Txn != "" && len(d.Participants) > 0 {
		h.decide(d, ts)
	}
}
