package oplog

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Errors of change-event conversion. Every error EventToEntry and
// ConvertEvent return wraps one of them, or ErrUnaddressablePath.
var (
	// ErrMalformedChangeEvent: an event lacks a field its operationType
	// needs, or has one of the wrong type.
	ErrMalformedChangeEvent = errors.New("malformed change event")
	// ErrUnsupportedChangeEvent: an event of an operationType the reader
	// does not know, or one it cannot replay (a time-series collection's
	// create). The reader stops rather than guess.
	ErrUnsupportedChangeEvent = errors.New("unsupported change event")
	// ErrChangeStreamInvalidated: the stream sent an invalidate event. A
	// stream over a whole deployment is never invalidated by DDL, so this
	// means the server ended it; the task must resume from its checkpoint.
	ErrChangeStreamInvalidated = errors.New("change stream invalidated")
)

// EventToEntry converts one change event (as MongoDB 6.0+ writes it with
// showExpandedEvents) into the oplog entry it stands for, with ts =
// clusterTime, wall = wallTime, ui = collectionUUID and the event's lsid
// and txnNumber: CRUD events become i, u and d entries, DDL events the
// matching command entries, and an update its $set/$unset (or a $v:2 diff
// with truncatedArrays). Events that change nothing a target keeps return
// ok false; invalidate is ErrChangeStreamInvalidated, an unknown type
// ErrUnsupportedChangeEvent. Event by event: docs/oplog-shapes.md, "Events
// as entries". The function only reads event; the entry does not share
// its memory.
func EventToEntry(event bson.Raw) (entry bson.Raw, ok bool, err error) {
	c, ok, err := ConvertEvent(event)
	if err != nil || !ok {
		return nil, false, err
	}
	return c.appendEntry(nil, false), true, nil
}

// EventsToEntries converts a complete sequence of change events, in stream
// order, into the entries a ChangeStreamReader would return for it:
// events that share a clusterTime become one applyOps entry, and events
// with no entry are left out. It is the reader's conversion without a
// server, for recorded events.
func EventsToEntries(events []bson.Raw) ([]bson.Raw, error) {
	var (
		g   EventGroup
		out []bson.Raw
	)
	for i, ev := range events {
		c, ok, err := ConvertEvent(ev)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if !ok {
			continue
		}
		if entry, _, _, done := g.Add(c, nil); done {
			out = append(out, entry)
		}
	}
	if !g.Empty() {
		entry, _, _ := g.Flush()
		out = append(out, entry)
	}
	return out, nil
}

// Change is a converted change event: the fields of the oplog entry it
// stands for (ConvertEvent).
type Change struct {
	ts      bson.Timestamp
	op      string
	ns      string
	o, o2   []byte
	ui      []byte // the collection UUID, or nil
	wall    int64
	hasWall bool
	lsid    []byte
	txn     int64
	hasTxn  bool
}

// TS is the change's clusterTime, the ts of its entry.
func (c *Change) TS() bson.Timestamp { return c.ts }

// appendEntry appends the change as an oplog entry; inner leaves out what
// an operation inside applyOps does not carry (ts, wall, lsid, txnNumber).
func (c *Change) appendEntry(dst []byte, inner bool) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	if !inner && c.lsid != nil && c.hasTxn {
		dst = bsoncore.AppendDocumentElement(dst, "lsid", c.lsid)
		dst = bsoncore.AppendInt64Element(dst, "txnNumber", c.txn)
	}
	dst = bsoncore.AppendStringElement(dst, "op", c.op)
	dst = bsoncore.AppendStringElement(dst, "ns", c.ns)
	if c.ui != nil {
		dst = bsoncore.AppendBinaryElement(dst, "ui", bson.TypeBinaryUUID, c.ui)
	}
	dst = bsoncore.AppendDocumentElement(dst, "o", c.o)
	if c.o2 != nil {
		dst = bsoncore.AppendDocumentElement(dst, "o2", c.o2)
	}
	if !inner {
		dst = bsoncore.AppendTimestampElement(dst, "ts", c.ts.T, c.ts.I)
		if c.hasWall {
			dst = bsoncore.AppendDateTimeElement(dst, "wall", c.wall)
		}
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// EventGroup collects consecutive changes that share a clusterTime: the
// events of one transaction, which become one applyOps entry. The
// change-stream reader groups what it reads with it, EventsToEntries what
// it is given.
type EventGroup struct {
	changes []Change
	token   bson.Raw // the resume token (_id) of the last event added
}

// Empty reports whether the group holds no change.
func (g *EventGroup) Empty() bool { return len(g.changes) == 0 }

// TS is the clusterTime of the group's changes; the group must not be
// empty.
func (g *EventGroup) TS() bson.Timestamp { return g.changes[0].ts }

// Add adds a change and its event's resume token. When the change starts a
// new group, the previous one is returned as an entry (done is true).
func (g *EventGroup) Add(c Change, token bson.Raw) (entry bson.Raw, ts bson.Timestamp, tok bson.Raw, done bool) {
	if !g.Empty() && g.TS() != c.ts {
		entry, ts, tok = g.Flush()
		done = true
	}
	g.changes = append(g.changes, c)
	g.token = token
	return entry, ts, tok, done
}

// Flush returns the group as one entry, its ts and resume token, and
// empties it. The group must not be empty.
func (g *EventGroup) Flush() (bson.Raw, bson.Timestamp, bson.Raw) {
	cs, tok := g.changes, g.token
	*g = EventGroup{}
	if len(cs) == 1 {
		return cs[0].appendEntry(nil, false), cs[0].ts, tok
	}
	return applyOpsEntry(cs), cs[0].ts, tok
}

// applyOpsEntry returns the changes, which share a ts, as one applyOps
// entry; with their lsid and txnNumber when all share the same.
func applyOpsEntry(cs []Change) bson.Raw {
	first := cs[0]
	sameTxn := first.lsid != nil && first.hasTxn
	for _, c := range cs[1:] {
		sameTxn = sameTxn && c.hasTxn && c.txn == first.txn && bytes.Equal(c.lsid, first.lsid)
	}
	idx, dst := bsoncore.AppendDocumentStart(nil)
	if sameTxn {
		dst = bsoncore.AppendDocumentElement(dst, "lsid", first.lsid)
		dst = bsoncore.AppendInt64Element(dst, "txnNumber", first.txn)
	}
	dst = bsoncore.AppendStringElement(dst, "op", "c")
	dst = bsoncore.AppendStringElement(dst, "ns", "admin.$cmd")
	oIdx, dst := bsoncore.AppendDocumentElementStart(dst, "o")
	aIdx, dst := bsoncore.AppendArrayElementStart(dst, "applyOps")
	for i := range cs {
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeEmbeddedDocument, strconv.Itoa(i))
		dst = cs[i].appendEntry(dst, true)
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, aIdx)
	dst, _ = bsoncore.AppendDocumentEnd(dst, oIdx)
	dst = bsoncore.AppendTimestampElement(dst, "ts", first.ts.T, first.ts.I)
	if first.hasWall {
		dst = bsoncore.AppendDateTimeElement(dst, "wall", first.wall)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}
