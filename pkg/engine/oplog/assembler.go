package oplog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Unit is what the Assembler emits: operations to apply together, in order.
type Unit struct {
	// TS is the ts of the entry that completed the unit: the entry itself,
	// the applyOps, the last entry of a partialTxn chain, or the
	// commitTransaction of a prepared transaction. Every op carries it.
	TS bson.Timestamp
	// FirstTS is the ts of the first oplog entry that went into the unit
	// (equal to TS unless the unit is a chain or a prepared transaction).
	// The checkpoint may only pass FirstTS once the unit is applied.
	FirstTS bson.Timestamp
	// Ops are the operations in order. A plain entry is a unit of one
	// (no-ops and DDL included, so the replayer sees every ts); an applyOps
	// is unwrapped into its operations.
	Ops []Entry
	// Txn marks a unit that came from applyOps: a transaction (possibly a
	// shard-key change written as one), a batched write or a user's
	// applyOps. Its operations all carry TS, so the checkpoint passes TS
	// only once every one of them is applied: it is never applied half.
	// Only a unit of several entries (FirstTS before TS) must also hold
	// the checkpoint below FirstTS while it is applied.
	Txn bool
	// Buffered are the raw entries of a unit of several entries before
	// the one that completed it (a chain's, a prepared transaction's):
	// they are no longer buffered, so a checkpoint saved while the unit
	// is applied saves them instead (see Checkpoint).
	Buffered []bson.Raw
}

// AssemblerState is the Assembler's buffered state for a checkpoint: the
// raw oplog entries of the transactions still open, in oplog order. It
// marshals to BSON and JSON.
type AssemblerState struct {
	Entries []bson.Raw `bson:"entries" json:"entries"`
}

// AssemblerStatus is a snapshot for /status and metrics.
type AssemblerStatus struct {
	// OpenTxns is the number of transactions buffered.
	OpenTxns int `json:"openTxns"`
	// Entries and Bytes are the oplog entries buffered and their size.
	Entries int `json:"entries"`
	Bytes   int `json:"bytes"`
}

// Assembler takes one replica set's (or shard's) entries in oplog order
// and emits units the replayer can apply: plain entries as units of one,
// applyOps unwrapped, partialTxn chains and prepared transactions buffered
// until they end and emitted as one unit with the ts of their last entry
// (a commit's); an entry whose transaction began out of sight is
// ErrIncompleteTxn. A caller keeps its checkpoint below OldestBufferedTS,
// or saves Checkpoint() with it and restores it with Recover (cases and
// rule: docs/architecture.md, "Transactions and checkpoints"). Not safe
// for concurrent use; each shard's reader has its own.
type Assembler struct {
	open map[string]*openTxn
	// chains are the open partialTxn chains without a session, by the ts
	// of their last entry (the next entry's prevOpTime).
	chains map[bson.Timestamp]*openTxn
}

// openTxn is one buffered transaction.
type openTxn struct {
	entries  []Entry // outer entries, oplog order, raw bytes owned
	prepared bool
	bytes    int
}

// NewAssembler returns an empty Assembler.
func NewAssembler() *Assembler {
	return &Assembler{open: map[string]*openTxn{}, chains: map[bson.Timestamp]*openTxn{}}
}

// Single reports whether Add would return e alone as a unit and leave the
// Assembler as it is (no transaction begins, continues or ends with e):
// a caller may then take e as its own unit without calling Add.
func Single(e Entry) bool {
	switch e.cmd {
	case CmdApplyOps, CmdCommitTransaction, CmdAbortTransaction:
		return false
	}
	return true
}

// Add takes the next entry in oplog order. It returns a unit when one is
// complete (ok=true); an entry that only fills a buffer returns ok=false.
// Parsing errors of the operations inside an applyOps are returned here.
// After an error the Assembler is unchanged by the entry.
func (a *Assembler) Add(e Entry) (u Unit, ok bool, err error) {
	switch e.cmd {
	case CmdApplyOps:
		u, ok, err = a.applyOps(e)
	case CmdCommitTransaction:
		u, ok, err = a.commit(e)
	case CmdAbortTransaction:
		err = a.abort(e)
	default:
		return Unit{TS: e.ts, FirstTS: e.ts, Ops: []Entry{e}}, true, nil
	}
	if err != nil {
		return Unit{}, false, fmt.Errorf("%s: %w", e, err)
	}
	return u, ok, nil
}

// txnKey identifies a transaction: its lsid's bytes and txnNumber.
func txnKey(e Entry) (string, bool) {
	lsid := e.LSID()
	n, ok := e.TxnNumber()
	if lsid == nil || !ok {
		return "", false
	}
	key := make([]byte, 0, len(lsid)+8)
	key = append(key, lsid...)
	key = binary.LittleEndian.AppendUint64(key, uint64(n))
	return string(key), true
}

// linked returns the prevOpTime ts when the entry continues a transaction.
func linked(e Entry) (bson.Timestamp, bool) {
	prev, ok := e.PrevOpTime()
	if !ok || prev.TS.IsZero() {
		return bson.Timestamp{}, false
	}
	return prev.TS, true
}

// continueTxn finds the open transaction e continues. dup reports an entry
// already buffered (read again after Recover).
func (a *Assembler) continueTxn(e Entry, key string) (t *openTxn, dup bool, err error) {
	t = a.open[key]
	prev, isLinked := linked(e)
	if t == nil {
		if isLinked {
			return nil, false, fmt.Errorf("%w: its previous entry (ts %d.%d) was not read", ErrIncompleteTxn, prev.T, prev.I)
		}
		return nil, false, nil
	}
	last := t.entries[len(t.entries)-1].ts
	if !e.ts.After(last) {
		return t, true, nil
	}
	if isLinked && !prev.Equal(last) {
		return nil, false, fmt.Errorf("%w: its previous entry is ts %d.%d, the last one read is ts %d.%d", ErrIncompleteTxn, prev.T, prev.I, last.T, last.I)
	}
	return t, false, nil
}

func (a *Assembler) applyOps(e Entry) (Unit, bool, error) {
	key, hasKey := txnKey(e)
	if !hasKey {
		return a.sessionless(e)
	}
	multi := e.PartialTxn() || e.Prepare()
	if !multi && a.open[key] == nil {
		if prev, isLinked := linked(e); isLinked && e.MultiOpType() != MultiOpAppliedSeparately {
			return Unit{}, false, fmt.Errorf("%w: its previous entry (ts %d.%d) was not read", ErrIncompleteTxn, prev.T, prev.I)
		}
		// A one-entry transaction, or one batch of a retryable write
		// (8.0): its prevOpTime names the previous batch, already a unit.
		return a.single(e)
	}
	t, dup, err := a.continueTxn(e, key)
	if err != nil || dup {
		return Unit{}, false, err
	}
	if t != nil && t.prepared {
		return Unit{}, false, fmt.Errorf("%w: an applyOps after the transaction's prepare entry", ErrMalformedEntry)
	}
	if multi {
		t, err = a.buffer(e, t)
		if err != nil {
			return Unit{}, false, err
		}
		if t != nil {
			a.open[key] = t
		}
		return Unit{}, false, nil
	}
	u, err := complete(e, t)
	if err != nil {
		return Unit{}, false, err
	}
	delete(a.open, key)
	return u, true, nil
}

// sessionless handles an applyOps without lsid and txnNumber: a user's
// applyOps, or an entry of a batched write's chain (partialTxn, linked by
// prevOpTime).
func (a *Assembler) sessionless(e Entry) (Unit, bool, error) {
	if e.Prepare() {
		return Unit{}, false, fmt.Errorf("%w: a prepare entry without lsid and txnNumber", ErrMalformedEntry)
	}
	prev, isLinked := linked(e)
	if !isLinked {
		if !e.PartialTxn() {
			return a.single(e)
		}
		for _, c := range a.chains {
			if c.entries[0].ts.Equal(e.ts) {
				return Unit{}, false, nil // read again after Recover
			}
		}
		t, err := a.buffer(e, nil)
		if err != nil {
			return Unit{}, false, err
		}
		a.chains[e.ts] = t
		return Unit{}, false, nil
	}
	t := a.chains[prev]
	if t == nil {
		for _, c := range a.chains {
			if !e.ts.After(c.entries[len(c.entries)-1].ts) && !e.ts.Before(c.entries[0].ts) {
				return Unit{}, false, nil // read again after Recover
			}
		}
		return Unit{}, false, fmt.Errorf("%w: a batched write's entry whose previous entry (ts %d.%d) was not read", ErrIncompleteTxn, prev.T, prev.I)
	}
	delete(a.chains, prev)
	if e.PartialTxn() {
		if _, err := a.buffer(e, t); err != nil {
			a.chains[prev] = t
			return Unit{}, false, err
		}
		a.chains[e.ts] = t
		return Unit{}, false, nil
	}
	u, err := complete(e, t)
	if err != nil {
		a.chains[prev] = t
		return Unit{}, false, err
	}
	return u, true, nil
}

// single emits an applyOps that is a whole unit on its own.
func (a *Assembler) single(e Entry) (Unit, bool, error) {
	u, err := complete(e, nil)
	return u, err == nil, err
}

// buffer appends a copy of e to t (a new openTxn when t is nil) and
// returns t.
func (a *Assembler) buffer(e Entry, t *openTxn) (*openTxn, error) {
	if err := checkInner(e); err != nil {
		return nil, err
	}
	c, err := e.clone()
	if err != nil {
		return nil, err
	}
	if t == nil {
		t = &openTxn{}
	}
	t.entries = append(t.entries, c)
	t.bytes += len(c.raw)
	t.prepared = e.Prepare()
	return t, nil
}

// complete returns the unit of the applyOps e, which ends t's chain (t
// may be nil: e is a unit on its own).
func complete(e Entry, t *openTxn) (Unit, error) {
	entries := []Entry{e}
	first := e.ts
	if t != nil {
		entries = append(slices.Clip(t.entries), e)
		first = t.entries[0].ts
	}
	ops, err := unwrap(entries, e.ts)
	if err != nil {
		return Unit{}, err
	}
	return Unit{TS: e.ts, FirstTS: first, Ops: ops, Txn: true, Buffered: raws(t)}, nil
}

// raws returns the raw entries of t (nil when t is nil).
func raws(t *openTxn) []bson.Raw {
	if t == nil {
		return nil
	}
	out := make([]bson.Raw, len(t.entries))
	for i, e := range t.entries {
		out[i] = e.raw
	}
	return out
}

func (a *Assembler) commit(e Entry) (Unit, bool, error) {
	key, ok := txnKey(e)
	if !ok {
		return Unit{}, false, fmt.Errorf("%w: commitTransaction without lsid and txnNumber", ErrMalformedEntry)
	}
	t := a.open[key]
	if t == nil {
		return Unit{}, false, fmt.Errorf("%w: commitTransaction of a transaction whose prepare entry was not read", ErrIncompleteTxn)
	}
	t, dup, err := a.continueTxn(e, key)
	if err != nil || dup {
		return Unit{}, false, err
	}
	if !t.prepared {
		return Unit{}, false, fmt.Errorf("%w: commitTransaction of a transaction that was not prepared", ErrIncompleteTxn)
	}
	ops, err := unwrap(t.entries, e.ts)
	if err != nil {
		return Unit{}, false, err
	}
	delete(a.open, key)
	return Unit{TS: e.ts, FirstTS: t.entries[0].ts, Ops: ops, Txn: true, Buffered: raws(t)}, true, nil
}

func (a *Assembler) abort(e Entry) error {
	key, ok := txnKey(e)
	if !ok {
		return fmt.Errorf("%w: abortTransaction without lsid and txnNumber", ErrMalformedEntry)
	}
	// An abort for a transaction never read changes nothing: drop what
	// there is.
	delete(a.open, key)
	return nil
}

// clone returns e with its own copy of the raw bytes (the caller's may
// belong to a cursor batch), for buffering.
func (e Entry) clone() (Entry, error) {
	c, err := parse(bytes.Clone(e.raw), e.inner())
	if err != nil {
		return Entry{}, err
	}
	c.ts = e.ts
	return c, nil
}

// checkInner parses the operations of an applyOps entry, to report a bad
// one when it arrives rather than when its transaction commits.
func checkInner(e Entry) error {
	_, err := unwrap([]Entry{e}, e.ts)
	return err
}

// unwrap returns the operations of applyOps entries, in order, each with
// ts. Nested applyOps (possible in a user's applyOps command) are
// unwrapped too.
func unwrap(entries []Entry, ts bson.Timestamp) ([]Entry, error) {
	var ops []Entry
	for _, e := range entries {
		var err error
		if ops, err = appendInner(ops, e, ts, 0); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

func appendInner(ops []Entry, e Entry, ts bson.Timestamp, depth int) ([]Entry, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: applyOps nested deeper than %d levels", ErrMalformedEntry, maxDepth)
	}
	arr, _, err := lookup(e.o, "applyOps")
	if err != nil {
		return nil, fmt.Errorf("%w: applyOps: %v", ErrMalformedEntry, err)
	}
	i := 0
	err = forEach(arr.Data, func(_ []byte, v bsoncore.Value) error {
		defer func() { i++ }()
		if v.Type != bsoncore.TypeEmbeddedDocument {
			return fmt.Errorf("%w: applyOps[%d] is a %s, not a document", ErrMalformedEntry, i, v.Type)
		}
		op, err := parse(bson.Raw(v.Data), true)
		if err != nil {
			return fmt.Errorf("applyOps[%d]: %w", i, err)
		}
		op.ts = ts
		if op.cmd == CmdApplyOps {
			ops, err = appendInner(ops, op, ts, depth+1)
			return err
		}
		if op.cmd.IsTxn() {
			return fmt.Errorf("%w: applyOps[%d] is a %s", ErrMalformedEntry, i, op.cmd)
		}
		ops = append(ops, op)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ops, nil
}

// OldestBufferedTS returns the ts of the oldest entry of an open
// transaction (ok=false when none is open). Without saving Checkpoint(),
// the replayer must keep its checkpoint below it.
func (a *Assembler) OldestBufferedTS() (bson.Timestamp, bool) {
	var (
		oldest bson.Timestamp
		ok     bool
	)
	for _, t := range a.all() {
		if ts := t.entries[0].ts; !ok || ts.Before(oldest) {
			oldest, ok = ts, true
		}
	}
	return oldest, ok
}

// Checkpoint returns the buffered entries of every open transaction, in
// oplog order, as a value that does not share memory with the Assembler.
func (a *Assembler) Checkpoint() AssemblerState {
	var all []Entry
	for _, t := range a.all() {
		all = append(all, t.entries...)
	}
	slices.SortFunc(all, func(x, y Entry) int { return x.ts.Compare(y.ts) })
	s := AssemblerState{Entries: make([]bson.Raw, len(all))}
	for i, e := range all {
		s.Entries[i] = bytes.Clone(e.raw)
	}
	return s
}

// Recover replaces the Assembler's state with a saved one. It fails if an
// entry does not parse or would complete a transaction (a state Checkpoint
// cannot have written).
func (a *Assembler) Recover(s AssemblerState) error {
	fresh := NewAssembler()
	for i, raw := range s.Entries {
		e, err := Parse(bytes.Clone(raw))
		if err != nil {
			return fmt.Errorf("recover transaction buffer, entry %d: %w", i, err)
		}
		if !e.cmd.IsTxn() {
			return fmt.Errorf("recover transaction buffer, entry %d (%s): not a transaction entry", i, e)
		}
		if _, ok, err := fresh.Add(e); err != nil {
			return fmt.Errorf("recover transaction buffer, entry %d: %w", i, err)
		} else if ok {
			return fmt.Errorf("recover transaction buffer, entry %d (%s): completes a transaction, so it cannot have been buffered", i, e)
		}
	}
	a.open, a.chains = fresh.open, fresh.chains
	return nil
}

// Status returns a snapshot of what is buffered.
func (a *Assembler) Status() AssemblerStatus {
	var s AssemblerStatus
	for _, t := range a.all() {
		s.OpenTxns++
		s.Entries += len(t.entries)
		s.Bytes += t.bytes
	}
	return s
}

// all returns every open transaction and chain.
func (a *Assembler) all() []*openTxn {
	out := make([]*openTxn, 0, len(a.open)+len(a.chains))
	for _, t := range a.open {
		out = append(out, t)
	}
	for _, t := range a.chains {
		out = append(out, t)
	}
	return out
}

// TxnID returns a short identifier of e's transaction (its lsid and
// txnNumber), the same on every shard it touches; false without them.
func TxnID(e Entry) (string, bool) {
	key, ok := txnKey(e)
	if !ok {
		return "", false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return strconv.FormatUint(h.Sum64(), 36), true
}

// Prepared returns the TxnID of every prepared transaction buffered.
func (a *Assembler) Prepared() []string {
	var out []string
	for _, t := range a.open {
		if t.prepared {
			if id, ok := TxnID(t.entries[0]); ok {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}
