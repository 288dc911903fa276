package oplog

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Op is the one-letter operation of an oplog entry (its op field).
type Op byte

// The operations of an oplog entry.
const (
	OpInsert  Op = 'i'
	OpUpdate  Op = 'u'
	OpDelete  Op = 'd'
	OpCommand Op = 'c'
	OpNoop    Op = 'n'
)

func (o Op) String() string { return string(rune(o)) }

// Kind classifies an entry, or a Write, for the replayer.
type Kind uint8

// The kinds of entries and writes.
const (
	KindUnknown Kind = iota
	// Insert is an 'i' entry.
	Insert
	// Update is a 'u' entry.
	Update
	// Delete is a 'd' entry.
	Delete
	// Noop is an 'n' entry: it changes nothing and only advances the
	// reader's watermark (shards write one about every 10 s when idle).
	Noop
	// Command is a 'c' entry: DDL, applyOps or a transaction's commit or
	// abort; Entry.Command says which.
	Command
)

var kindNames = [...]string{"unknown", "insert", "update", "delete", "noop", "command"}

// String returns the kind in lower case, fit for a metric label.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// OpTime is an optime: a timestamp and the election term it was written in.
type OpTime struct {
	TS   bson.Timestamp
	Term int64
}

// Entry is a parsed view of one raw oplog entry. It keeps the raw bytes
// (Raw) and the fields every entry needs (ts, op, ns, o, o2 and the
// transaction flags); the other fields are looked up in the raw bytes when
// asked for. Parse has checked the type of every field it knows, so the
// accessors never fail: a field that is absent reads as its zero value and
// ok=false.
//
// An Entry refers to the bytes given to Parse and does not copy them: do not
// modify or reuse them while the Entry (or a Write made from it) is in use.
// The driver's cursor.Current is reused by the next call to Next, so clone it.
type Entry struct {
	raw   bson.Raw
	ts    bson.Timestamp
	ns    string
	o, o2 bson.Raw
	op    Op
	cmd   CommandClass
	flags entryFlags
}

type entryFlags uint8

const (
	flagFromMigrate entryFlags = 1 << iota
	flagPartialTxn
	flagPrepare
	// flagInner marks an operation taken out of an applyOps array: its raw
	// bytes have no ts, and its TS is the one of the entry that completed
	// its transaction.
	flagInner
)

// Parse parses one raw oplog entry (a document of local.oplog.rs). It checks
// the BSON framing, the type of every field it knows, and the fields each
// operation requires:
//
//   - every entry: ts (Timestamp), op (one of i, u, d, c, n), o (document),
//     and ns, except for a no-op (whose ns is usually "");
//   - i: ns "db.coll" and o with an _id (o2, when present, with an _id);
//   - u: ns "db.coll", a non-empty o, and o2 with an _id (the filter);
//   - d: ns "db.coll" and o with an _id (the document key);
//   - c: ns "db.$cmd" and a non-empty o naming the command; applyOps must be
//     an array.
//
// Nested documents (the contents of o and o2) are not validated here; the
// code that walks them does so safely. Parse never panics: malformed input
// is an error wrapping ErrMalformedEntry.
func Parse(raw bson.Raw) (Entry, error) {
	return parse(raw, false)
}

// The known top-level fields each have a bit, to refuse duplicates: a
// duplicated field would read differently here and on the server.
const (
	bitTS uint16 = 1 << iota
	bitT
	bitOp
	bitNS
	bitO
	bitO2
	bitUI
	bitFromMigrate
	bitLSID
	bitTxnNumber
	bitPrevOpTime
	bitPartialTxn
	bitPrepare
	bitWall
)

// fieldBit returns the bit of a known top-level field, 0 for others. A
// switch, not a map: this runs for every field of every entry.
func fieldBit(k []byte) uint16 {
	switch string(k) {
	case "ts":
		return bitTS
	case "t":
		return bitT
	case "op":
		return bitOp
	case "ns":
		return bitNS
	case "o":
		return bitO
	case "o2":
		return bitO2
	case "ui":
		return bitUI
	case "fromMigrate":
		return bitFromMigrate
	case "lsid":
		return bitLSID
	case "txnNumber":
		return bitTxnNumber
	case "prevOpTime":
		return bitPrevOpTime
	case "partialTxn":
		return bitPartialTxn
	case "prepare":
		return bitPrepare
	case "wall":
		return bitWall
	}
	return 0
}

// parse parses an entry; inner entries (from an applyOps array) have no ts.
func parse(raw bson.Raw, inner bool) (Entry, error) {
	e := Entry{raw: raw}
	if inner {
		e.flags |= flagInner
	}
	var seen uint16
	err := forEach(raw, func(k []byte, v bsoncore.Value) error {
		bit := fieldBit(k)
		if bit == 0 {
			return nil
		}
		if seen&bit != 0 {
			return fmt.Errorf("field %q appears twice", k)
		}
		seen |= bit
		return e.setField(bit, k, v)
	})
	if err == nil {
		err = e.check(seen, inner)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %s", ErrMalformedEntry, e.describe(err))
	}
	return e, nil
}

// describe prefixes err with what is known of the entry so far.
func (e *Entry) describe(err error) string {
	var b strings.Builder
	if e.op != 0 {
		fmt.Fprintf(&b, "op %s ", e.op)
	}
	if e.ns != "" {
		fmt.Fprintf(&b, "ns %s ", e.ns)
	}
	if !e.ts.IsZero() {
		fmt.Fprintf(&b, "ts %d.%d ", e.ts.T, e.ts.I)
	}
	if b.Len() > 0 {
		return b.String() + ": " + err.Error()
	}
	return err.Error()
}

// setField checks and records one known top-level field, named k.
func (e *Entry) setField(bit uint16, k []byte, v bsoncore.Value) error {
	wrong := func(want string) error { return fmt.Errorf("field %q must be %s, not %s", k, want, v.Type) }
	switch bit {
	case bitTS:
		t, i, ok := v.TimestampOK()
		if !ok {
			return wrong("a timestamp")
		}
		e.ts = bson.Timestamp{T: t, I: i}
	case bitT, bitTxnNumber:
		if _, ok := integer(v); !ok {
			return wrong("an integer")
		}
	case bitOp:
		s, ok := stringBytes(v)
		if !ok {
			return wrong("a string")
		}
		if len(s) != 1 || !strings.Contains("iudcn", string(s)) {
			return fmt.Errorf("unknown op %q", s)
		}
		e.op = Op(s[0])
	case bitNS:
		s, ok := stringBytes(v)
		if !ok {
			return wrong("a string")
		}
		e.ns = intern(s)
	case bitO, bitO2, bitLSID:
		if v.Type != bsoncore.TypeEmbeddedDocument {
			return wrong("a document")
		}
		if _, err := docBytes(v.Data); err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
		switch bit {
		case bitO:
			e.o = bson.Raw(v.Data)
		case bitO2:
			e.o2 = bson.Raw(v.Data)
		}
	case bitUI:
		if _, _, ok := v.BinaryOK(); !ok {
			return wrong("binary (a UUID)")
		}
	case bitFromMigrate, bitPartialTxn, bitPrepare:
		b, ok := v.BooleanOK()
		if !ok {
			return wrong("a boolean")
		}
		if !b {
			break
		}
		switch bit {
		case bitFromMigrate:
			e.flags |= flagFromMigrate
		case bitPartialTxn:
			e.flags |= flagPartialTxn
		default:
			e.flags |= flagPrepare
		}
	case bitPrevOpTime:
		if _, err := readOpTime(v); err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	case bitWall:
		if _, ok := v.DateTimeOK(); !ok {
			return wrong("a date")
		}
	}
	return nil
}

// stringBytes returns a string value's bytes without copying them.
func stringBytes(v bsoncore.Value) ([]byte, bool) {
	if v.Type != bsoncore.TypeString || len(v.Data) < 5 {
		return nil, false
	}
	n := int(int32(binary.LittleEndian.Uint32(v.Data)))
	if n < 1 || n != len(v.Data)-4 || v.Data[len(v.Data)-1] != 0 {
		return nil, false
	}
	return v.Data[4 : len(v.Data)-1], true
}

// readOpTime reads {ts: Timestamp, t: long}.
func readOpTime(v bsoncore.Value) (OpTime, error) {
	if v.Type != bsoncore.TypeEmbeddedDocument {
		return OpTime{}, fmt.Errorf("must be a document {ts, t}, not %s", v.Type)
	}
	doc := v.Data
	var (
		ot    OpTime
		hasTS bool
	)
	err := forEach(doc, func(k []byte, v bsoncore.Value) error {
		switch string(k) {
		case "ts":
			t, i, ok := v.TimestampOK()
			if !ok {
				return fmt.Errorf("ts must be a timestamp, not %s", v.Type)
			}
			ot.TS, hasTS = bson.Timestamp{T: t, I: i}, true
		case "t":
			n, ok := integer(v)
			if !ok {
				return fmt.Errorf("t must be an integer, not %s", v.Type)
			}
			ot.Term = n
		}
		return nil
	})
	if err == nil && !hasTS {
		err = fmt.Errorf("ts is missing")
	}
	return ot, err
}

// check verifies the fields each operation requires.
func (e *Entry) check(seen uint16, inner bool) error {
	has := func(bit uint16) bool { return seen&bit != 0 }
	switch {
	case !has(bitOp):
		return fmt.Errorf("field \"op\" is missing")
	case !inner && !has(bitTS):
		return fmt.Errorf("field \"ts\" is missing")
	case !has(bitO):
		return fmt.Errorf("field \"o\" is missing")
	case e.op != OpNoop && !has(bitNS):
		return fmt.Errorf("field \"ns\" is missing")
	}
	switch e.op {
	case OpInsert, OpDelete:
		if err := checkCollNS(e.ns); err != nil {
			return err
		}
		if err := hasID(e.o, "o"); err != nil {
			return err
		}
		if e.op == OpInsert && e.o2 != nil {
			return hasID(e.o2, "o2")
		}
	case OpUpdate:
		if err := checkCollNS(e.ns); err != nil {
			return err
		}
		if e.o2 == nil {
			return fmt.Errorf("field \"o2\" (the document key) is missing")
		}
		if err := hasID(e.o2, "o2"); err != nil {
			return err
		}
		if len(e.o) <= 5 {
			return fmt.Errorf("field \"o\" is empty")
		}
	case OpCommand:
		return e.checkCommand()
	}
	return nil
}

// checkCollNS checks a "db.coll" namespace.
func checkCollNS(ns string) error {
	db, coll, ok := strings.Cut(ns, ".")
	if !ok || db == "" || coll == "" {
		return fmt.Errorf("ns %q is not a db.collection namespace", ns)
	}
	return nil
}

// hasID checks that doc (field name for messages) has an _id.
func hasID(doc bson.Raw, name string) error {
	_, found, err := lookup(doc, "_id")
	if err != nil {
		return fmt.Errorf("field %q: %w", name, err)
	}
	if !found {
		return fmt.Errorf("field %q has no _id", name)
	}
	return nil
}

// checkCommand checks a 'c' entry and classifies its command.
func (e *Entry) checkCommand() error {
	db, ok := strings.CutSuffix(e.ns, ".$cmd")
	if !ok || db == "" || strings.Contains(db, ".") {
		return fmt.Errorf("ns %q of a command is not db.$cmd", e.ns)
	}
	first := true
	err := forEach(e.o, func(k []byte, v bsoncore.Value) error {
		if first {
			first = false
			e.cmd = classify(string(k))
			if e.cmd == CmdApplyOps && v.Type != bsoncore.TypeArray {
				return fmt.Errorf("applyOps must be an array, not %s", v.Type)
			}
			if e.cmd == CmdApplyOps {
				if _, err := docBytes(v.Data); err != nil {
					return fmt.Errorf("applyOps: %w", err)
				}
			}
			return nil
		}
		// MongoDB writes a transaction's partialTxn and prepare flags
		// inside o, next to the applyOps array.
		if e.cmd == CmdApplyOps && (string(k) == "partialTxn" || string(k) == "prepare") {
			b, ok := v.BooleanOK()
			if !ok {
				return fmt.Errorf("o.%s must be a boolean, not %s", k, v.Type)
			}
			if b && string(k) == "partialTxn" {
				e.flags |= flagPartialTxn
			} else if b {
				e.flags |= flagPrepare
			}
		}
		return nil
	})
	if err == nil && first {
		err = fmt.Errorf("field \"o\" of a command is empty")
	}
	return err
}

// Raw returns the entry's raw bytes. For an operation taken out of an
// applyOps array these are the inner operation's bytes, without ts.
func (e Entry) Raw() bson.Raw { return e.raw }

// TS returns the entry's timestamp. For an operation taken out of an
// applyOps array it is the ts of the entry that completed the transaction
// (the applyOps itself, the last entry of a partialTxn chain, or the
// commitTransaction of a prepared transaction).
func (e Entry) TS() bson.Timestamp { return e.ts }

// Op returns the one-letter operation.
func (e Entry) Op() Op { return e.op }

// NS returns the entry's ns: "db.coll" for CRUD, "db.$cmd" for commands,
// "" for most no-ops.
func (e Entry) NS() string { return e.ns }

// Namespace returns NS split at the first dot.
func (e Entry) Namespace() catalog.Namespace { return catalog.ParseNamespace(e.ns) }

// O returns the o field: the document (insert), the update (update), the
// document key (delete), the command (command) or the message (no-op).
func (e Entry) O() bson.Raw { return e.o }

// O2 returns the o2 field (the document key of an update or, on newer
// servers, of an insert), or nil.
func (e Entry) O2() bson.Raw { return e.o2 }

// FromMigrate reports fromMigrate: true (a chunk migration's copy or range
// deletion, not a user write).
func (e Entry) FromMigrate() bool { return e.flags&flagFromMigrate != 0 }

// PartialTxn reports partialTxn: true (read from o, where MongoDB writes
// it, or from the top level): an applyOps that is not the last of its
// transaction.
func (e Entry) PartialTxn() bool { return e.flags&flagPartialTxn != 0 }

// Prepare reports prepare: true (in o, or at the top level): the applyOps of
// a prepared transaction, applied when its commitTransaction comes.
func (e Entry) Prepare() bool { return e.flags&flagPrepare != 0 }

// inner reports whether the entry was taken out of an applyOps array.
func (e Entry) inner() bool { return e.flags&flagInner != 0 }

// field looks a top-level field up in the raw bytes.
func (e Entry) field(k string) (bsoncore.Value, bool) {
	v, found, err := lookup(e.raw, k)
	return v, found && err == nil
}

// Term returns the election term (t), when present.
func (e Entry) Term() (int64, bool) {
	v, ok := e.field("t")
	if !ok {
		return 0, false
	}
	return integer(v)
}

// UI returns the collection UUID (ui), when present.
func (e Entry) UI() (bson.Binary, bool) {
	v, ok := e.field("ui")
	if !ok {
		return bson.Binary{}, false
	}
	sub, data, ok := v.BinaryOK()
	return bson.Binary{Subtype: sub, Data: data}, ok
}

// LSID returns the logical session id of a transaction or retryable write,
// or nil.
func (e Entry) LSID() bson.Raw {
	v, ok := e.field("lsid")
	if !ok {
		return nil
	}
	return bson.Raw(v.Data)
}

// TxnNumber returns the transaction number, when present.
func (e Entry) TxnNumber() (int64, bool) {
	v, ok := e.field("txnNumber")
	if !ok {
		return 0, false
	}
	return integer(v)
}

// PrevOpTime returns the optime of the previous entry of the same
// transaction (a zero ts for the first one), when present.
func (e Entry) PrevOpTime() (OpTime, bool) {
	v, ok := e.field("prevOpTime")
	if !ok {
		return OpTime{}, false
	}
	ot, err := readOpTime(v)
	return ot, err == nil
}

// MultiOpAppliedSeparately is the multiOpType of MongoDB 8.0's batched
// writes of a retryable write: each applyOps is applied on its own,
// although its prevOpTime links it to the previous batch.
const MultiOpAppliedSeparately = 1

// MultiOpType returns the multiOpType field (0 when absent).
func (e Entry) MultiOpType() int64 {
	v, ok := e.field("multiOpType")
	if !ok {
		return 0
	}
	n, _ := integer(v)
	return n
}

// Upsert reports b: true, which a user's applyOps may set on an update:
// the document is created when it does not exist.
func (e Entry) Upsert() bool {
	v, ok := e.field("b")
	if !ok {
		return false
	}
	b, _ := v.BooleanOK()
	return b
}

// WallTime returns the wall clock time (wall), when present.
func (e Entry) WallTime() (time.Time, bool) {
	v, ok := e.field("wall")
	if !ok {
		return time.Time{}, false
	}
	ms, ok := v.DateTimeOK()
	return time.UnixMilli(ms).UTC(), ok
}

// Kind classifies the entry by its op.
func (e Entry) Kind() Kind {
	switch e.op {
	case OpInsert:
		return Insert
	case OpUpdate:
		return Update
	case OpDelete:
		return Delete
	case OpNoop:
		return Noop
	case OpCommand:
		return Command
	}
	return KindUnknown
}

// Command returns the class of a command entry (CmdNone for other kinds).
func (e Entry) Command() CommandClass { return e.cmd }

// String describes the entry for logs: op, ns and ts.
func (e Entry) String() string {
	s := fmt.Sprintf("%s %s ts=%d.%d", e.op, e.ns, e.ts.T, e.ts.I)
	if e.op == OpCommand {
		s += " " + e.cmd.String()
	}
	return s
}
