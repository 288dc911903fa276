package source

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// Errors of the change-stream reader. Every error EventToEntry returns
// wraps one of them, or oplog.ErrUnaddressablePath.
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

// Server error codes for a change stream that cannot resume.
const (
	codeChangeStreamFatal       = 280 // the resume token is no longer in the oplog
	codeChangeStreamHistoryLost = 286 // startAtOperationTime is older than the oplog
)

// ChangeStreamOptions tune a ChangeStreamReader. Zero values take the
// defaults.
type ChangeStreamOptions struct {
	// BatchEvents caps the events one Next reads (1000 when zero); it is
	// also the stream's batch size. Events that share a clusterTime are
	// never split between two calls, so a large transaction may be read
	// over several calls and returned by the last of them.
	BatchEvents int
	// MaxAwait is how long one getMore waits for new events (1 s when
	// zero): the longest Next blocks when the source is idle.
	MaxAwait time.Duration
	// ResumeToken, when set, is where the stream resumes (resumeAfter),
	// instead of just after the from timestamp. Take it from
	// ChangeStreamReader.ResumeToken.
	ResumeToken bson.Raw
	// FullDocument is the stream's fullDocument option ("" leaves it
	// unset). With options.UpdateLookup, options.WhenAvailable or
	// options.Required, update events carry a full document, which the
	// reader uses for updates whose paths cannot be written as update
	// operators (see EventToEntry). It costs a lookup (updateLookup) or
	// pre- and post-images on the source's collections.
	FullDocument options.FullDocument
}

// ChangeStreamReader is the OplogReader of incremental.method:
// changeStream. It watches the whole source deployment (client.Watch with
// showExpandedEvents, so DDL is seen too) and turns each change event into
// the oplog entry the server wrote for it (see EventToEntry), so the
// replayer and the oplog package read it as they read local.oplog.rs.
//
// Position. The stream starts at startAtOperationTime = from+1 (everything
// after from), or after a resume token (ChangeStreamOptions.ResumeToken).
// After an error it closes the stream and the next Next re-opens it after
// the resume token of the last entry it returned, so entries are neither
// lost nor repeated. Events that were read but not returned (a transaction
// still being collected) are dropped with the stream and read again.
//
// Transactions and clusterTime. Change events carry no applyOps: the
// events of one transaction arrive one by one, each with the transaction's
// lsid and txnNumber and all with the same clusterTime (the commit's). So
// do the events of one applyOps written without a transaction (batched
// multi-deletes on MongoDB 6.1+). The reader therefore holds consecutive
// events that share a clusterTime until it knows none is left: an event
// with another clusterTime arrives, a batch ends with a
// postBatchResumeToken past that clusterTime, or a getMore returns no
// event (the server emits all the events of one oplog entry together).
// Then it returns them as one applyOps entry with that ts (with the lsid
// and txnNumber when they all share one). The Assembler unwraps it into one
// unit and the replayer applies it as one barrier, as it does the source's
// own applyOps: a transaction is never half applied, and no two entries
// share a ts, so a checkpoint at a ts means everything of that ts is
// applied. A held transaction is bounded by the source's transaction size,
// not by BatchEvents. On a sharded source, events of different shards that
// happen to share a clusterTime are merged into one applyOps too (they are
// adjacent in the stream, which mongos sorts by clusterTime); harmless, as
// the barrier applies them in stream order.
//
// Batches and idle sources. One Next reads one batch of the stream (one
// getMore, waiting at most MaxAwait) and returns what it completes. Every
// batch ends with a postBatchResumeToken, which advances even when no event
// matches (on an idle source too: replica sets write a no-op every 10 s).
// When it is past the last entry returned, the reader returns a no-op
// entry (op "n") with the ts just below that token's clusterTime: every
// event before it has been read, so the replayer's watermark, and the
// checkpoint, move on while the source is idle or only writes what the
// stream does not show, as they do with the oplog's own no-ops.
//
// A ChangeStreamReader is not safe for concurrent use, except Newest,
// Position and ResumeToken, which may be called from any goroutine.
type ChangeStreamReader struct {
	client *mongo.Client
	opts   ChangeStreamOptions
	cs     *mongo.ChangeStream
	group  grouper
	// stashed is an error met after entries were read: the entries are
	// returned first, the error by the next call.
	stashed error

	mu     sync.Mutex
	token  bson.Raw       // resume after this: the position after the last entry returned
	last   bson.Timestamp // ts of the last entry returned (from, at first)
	newest bson.Timestamp
}

// Check that the reader is an OplogReader.
var _ OplogReader = (*ChangeStreamReader)(nil)

// NewChangeStreamReader returns a reader of the changes after from (or
// after opts.ResumeToken, when set). A zero from without a token starts at
// the present. The stream is opened by the first Next.
func NewChangeStreamReader(client *mongo.Client, from bson.Timestamp, opts ChangeStreamOptions) *ChangeStreamReader {
	if opts.BatchEvents <= 0 {
		opts.BatchEvents = 1000
	}
	if opts.MaxAwait <= 0 {
		opts.MaxAwait = time.Second
	}
	return &ChangeStreamReader{client: client, opts: opts, token: bytes.Clone(opts.ResumeToken), last: from, newest: from}
}

// Position returns the ts of the last entry returned (from, before any).
func (r *ChangeStreamReader) Position() bson.Timestamp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// ResumeToken returns the resume token just after the last entry Next
// returned (nil before the stream gave one), for a checkpoint to keep and
// pass back in ChangeStreamOptions.ResumeToken. It is the reader's
// position, not what is applied: keep it only with a checkpoint taken once
// every entry returned is on the target (a clean stop); otherwise resume
// from the applied ts, which is always safe.
func (r *ChangeStreamReader) ResumeToken() bson.Raw {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.token)
}

// Newest implements OplogReader. It is the newest position the stream has
// reported: the highest clusterTime of the events read, or of the
// postBatchResumeToken the server returns with every batch. It costs no
// round trip. When the reader is caught up it is the source's newest write
// (the token follows the oplog, periodic no-ops included); while the reader
// is behind it is where the reader is, so lag computed from it counts the
// writers' lag behind the reader, not the reader's behind the source.
func (r *ChangeStreamReader) Newest(context.Context) (bson.Timestamp, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newest, nil
}

// Close closes the stream, if open.
func (r *ChangeStreamReader) Close(ctx context.Context) error {
	if r.cs == nil {
		return nil
	}
	err := r.cs.Close(ctx)
	r.cs = nil
	r.group = grouper{}
	return err
}

func (r *ChangeStreamReader) noteNewest(ts bson.Timestamp) {
	r.mu.Lock()
	if ts.After(r.newest) {
		r.newest = ts
	}
	r.mu.Unlock()
}

// describe names the reader's position for messages.
func (r *ChangeStreamReader) describe() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.token != nil {
		if ts, ok := tokenTS(r.token); ok {
			return "resume token at " + formatTS(ts)
		}
		return "a resume token"
	}
	return formatTS(r.last)
}

// open opens the stream after the last entry returned.
func (r *ChangeStreamReader) open(ctx context.Context) error {
	o := options.ChangeStream().SetShowExpandedEvents(true).SetMaxAwaitTime(r.opts.MaxAwait).
		SetBatchSize(int32(min(r.opts.BatchEvents, math.MaxInt32)))
	if r.opts.FullDocument != "" {
		o.SetFullDocument(r.opts.FullDocument)
	}
	r.mu.Lock()
	token, last := r.token, r.last
	r.mu.Unlock()
	switch {
	case token != nil:
		o.SetResumeAfter(token)
	case !last.IsZero():
		at := tsAfter(last)
		o.SetStartAtOperationTime(&at)
	}
	cs, err := r.client.Watch(ctx, mongo.Pipeline{}, o)
	if err != nil {
		return r.streamError("open change stream", err)
	}
	r.cs = cs
	return nil
}

// streamError wraps an error of the stream, as ErrOplogWindowLost when the
// server can no longer resume from the reader's position.
func (r *ChangeStreamReader) streamError(what string, err error) error {
	var se mongo.ServerError
	if errors.As(err, &se) && (se.HasErrorCode(codeChangeStreamHistoryLost) || se.HasErrorCode(codeChangeStreamFatal)) {
		return fmt.Errorf("%w: the change stream cannot resume after %s (%v); "+
			"resync: delete the task's checkpoint (database mongoferry, or the task) and run it again, and enlarge the source's oplog so a copy fits in its window",
			ErrOplogWindowLost, r.describe(), err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s after %s: %w", what, r.describe(), err)
	}
	return fmt.Errorf("%s after %s: %w (incremental.method changeStream needs a replica set or sharded cluster running MongoDB 6.0 or later)",
		what, r.describe(), err)
}

// Next implements OplogReader: it reads one batch of events (at most
// BatchEvents) and returns the entries they complete, possibly none. It
// never returns entries together with an error: entries read before an
// error are returned, and the error by the next call, which re-opens the
// stream after them.
func (r *ChangeStreamReader) Next(ctx context.Context) ([]bson.Raw, error) {
	if err := r.stashed; err != nil {
		r.stashed = nil
		return nil, err
	}
	if r.cs == nil {
		if err := r.open(ctx); err != nil {
			return nil, err
		}
	}
	var (
		out    []bson.Raw
		token  bson.Raw // the position after out
		lastTS bson.Timestamp
		err    error
		idle   bool
	)
	emit := func(entry bson.Raw, ts bson.Timestamp, tok bson.Raw) {
		out, lastTS, token = append(out, entry), ts, tok
	}
	// Read one batch (a getMore's worth, at most BatchEvents): what it
	// completes is returned at once rather than held for more events.
	var batchEnd bool
	for n := 0; n < r.opts.BatchEvents; n++ {
		if n > 0 && r.cs.RemainingBatchLength() == 0 {
			batchEnd = true
			break
		}
		if !r.cs.TryNext(ctx) {
			idle = true
			break
		}
		event := bson.Raw(bytes.Clone(r.cs.Current))
		id, _ := event.Lookup("_id").DocumentOK()
		c, ok, cerr := convert(event)
		if cerr != nil {
			err = fmt.Errorf("change event after %s: %w", r.describe(), cerr)
			break
		}
		r.noteNewest(c.ts)
		if !ok {
			// Nothing to apply: it only closes a group of another ts.
			if !r.group.empty() && r.group.ts() != c.ts {
				emit(r.group.flush())
			}
			if r.group.empty() {
				token = bson.Raw(id)
			}
			continue
		}
		if entry, ts, tok, done := r.group.add(c, id); done {
			emit(entry, ts, tok)
		}
	}
	if err == nil {
		if serr := r.cs.Err(); serr != nil {
			err = r.streamError("read change stream", serr)
		}
	}
	switch {
	case err != nil:
		// Re-open after the last entry returned; held events are read again.
		_ = r.Close(context.WithoutCancel(ctx))
		if len(out) == 0 {
			return nil, err
		}
		r.stashed = err
	case r.cs.ID() == 0:
		_ = r.Close(context.WithoutCancel(ctx))
	case idle || batchEnd:
		// At the end of a batch the driver's resume token is the
		// postBatchResumeToken: every event before its clusterTime is read.
		pbrt := r.cs.ResumeToken()
		pts, known := tokenTS(pbrt)
		if known {
			r.noteNewest(pts)
		}
		if !r.group.empty() && (idle || (known && pts.After(r.group.ts()))) {
			emit(r.group.flush())
		}
		if !r.group.empty() || pbrt == nil {
			break
		}
		token = bytes.Clone(pbrt)
		prev := lastTS
		if len(out) == 0 {
			prev = r.Position()
		}
		if below := tsBefore(pts); known && below.After(prev) {
			emit(noopEntry(below), below, token)
		}
	}
	r.mu.Lock()
	if token != nil {
		r.token = token
	}
	if len(out) > 0 {
		r.last = lastTS
	}
	r.mu.Unlock()
	return out, nil
}

// EventToEntry converts one change event (as MongoDB 6.0+ writes it with
// showExpandedEvents) into the oplog entry it stands for, with
// ts = clusterTime, wall = wallTime, ui = collectionUUID, and the event's
// lsid and txnNumber:
//
//   - insert: {op: "i", ns, o: fullDocument, o2: documentKey};
//   - update: {op: "u", ns, o: <update>, o2: documentKey}, see below;
//   - replace: {op: "u", ns, o: fullDocument, o2: documentKey}, a
//     replacement;
//   - delete: {op: "d", ns, o: documentKey};
//   - DDL, as {op: "c", ns: "db.$cmd", o: <command>}: create ->
//     {create: coll, <operationDescription>} (options, or viewOn and
//     pipeline for a view); drop -> {drop: coll}; rename ->
//     {renameCollection: "db.coll", to: "db.coll", dropTarget};
//     dropDatabase -> {dropDatabase: 1}; createIndexes ->
//     {commitIndexBuild: coll, indexes}; dropIndexes -> {dropIndexes: coll,
//     index: <name or names>}; modify -> {collMod: coll,
//     <operationDescription>}; startIndexBuild and abortIndexBuild keep
//     their names (oplog.Skip skips them);
//   - sharding events (shardCollection, reshardCollection,
//     refineCollectionShardKey and the internal ones) and endOfTransaction
//     change nothing a target keeps: ok is false and there is no entry;
//   - invalidate: ErrChangeStreamInvalidated; any other operationType:
//     ErrUnsupportedChangeEvent naming it. A time-series collection's create
//     is refused too: the event does not carry the collection's time-series
//     options (create it on the target by hand, or use incremental.method
//     oplog).
//
// Updates. updateDescription is what the server derived from the oplog's
// $v:2 diff, so it is exact for the event's moment:
//
//   - updatedFields and removedFields become {$v: 1, $set: updatedFields,
//     $unset: {<removed>: true}} (dotted paths, as the server gives them);
//   - with truncatedArrays (an array shrunk by $pop, $pull, a pipeline),
//     which $set and $unset cannot express, the whole description becomes
//     a $v:2 diff instead: each path is split into its fields (taken from
//     disambiguatedPaths when present, else split at the dots) and nested
//     into s<field> sub-diffs, updated fields go to u sections, removed
//     fields to d sections, and each truncated array becomes an array diff
//     {a: true, l: newSize} holding the updates of its elements as u<n> and
//     s<n>. oplog.Translate turns it into the same $set/$unset plus a
//     $push {$each: [], $slice: newSize} that truncates.
//
// A path naming a field that contains '.' or starts with '$' (shown by
// disambiguatedPaths, MongoDB 6.1+) cannot be written as an update path.
// Such an update becomes a replacement by fullDocument when the event has
// one (open the stream with FullDocument); with updateLookup that document
// is the one the lookup found, possibly later than the event, which the
// following events then converge from, as replay does over the copy.
// Without a full document it is an error wrapping oplog.ErrUnaddressablePath.
// On MongoDB 6.0, which has no disambiguatedPaths, a field named "a.b" and
// a field b inside a look alike, and the update is written as the latter.
// Two more things updateDescription does not say: whether a field was
// new (MongoDB appends new fields at the end, as $set does) or moved to the
// end by a pipeline update (which $set does not do, so field order may
// differ after such an update).
//
// The function only reads event; the entry does not share its memory.
func EventToEntry(event bson.Raw) (entry bson.Raw, ok bool, err error) {
	c, ok, err := convert(event)
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
		g   grouper
		out []bson.Raw
	)
	for i, ev := range events {
		c, ok, err := convert(ev)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if !ok {
			continue
		}
		if entry, _, _, done := g.add(c, nil); done {
			out = append(out, entry)
		}
	}
	if !g.empty() {
		entry, _, _ := g.flush()
		out = append(out, entry)
	}
	return out, nil
}

// change is a converted event: the fields of its oplog entry.
type change struct {
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

// appendEntry appends the change as an oplog entry; inner leaves out what
// an operation inside applyOps does not carry (ts, wall, lsid, txnNumber).
func (c *change) appendEntry(dst []byte, inner bool) []byte {
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

// grouper collects consecutive changes that share a clusterTime.
type grouper struct {
	changes []change
	token   bson.Raw // the resume token (_id) of the last event added
}

func (g *grouper) empty() bool { return len(g.changes) == 0 }

func (g *grouper) ts() bson.Timestamp { return g.changes[0].ts }

// add adds a change and its event's resume token. When the change starts a
// new group, the previous one is returned as an entry (done is true).
func (g *grouper) add(c change, token bson.Raw) (entry bson.Raw, ts bson.Timestamp, tok bson.Raw, done bool) {
	if !g.empty() && g.ts() != c.ts {
		entry, ts, tok = g.flush()
		done = true
	}
	g.changes = append(g.changes, c)
	g.token = token
	return entry, ts, tok, done
}

// flush returns the group as one entry, its ts and resume token, and
// empties it. The group must not be empty.
func (g *grouper) flush() (bson.Raw, bson.Timestamp, bson.Raw) {
	cs, tok := g.changes, g.token
	*g = grouper{}
	if len(cs) == 1 {
		return cs[0].appendEntry(nil, false), cs[0].ts, tok
	}
	return applyOpsEntry(cs), cs[0].ts, tok
}

// applyOpsEntry returns the changes, which share a ts, as one applyOps
// entry; with their lsid and txnNumber when all share the same.
func applyOpsEntry(cs []change) bson.Raw {
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

// noopEntry is the no-op entry that marks a position.
func noopEntry(ts bson.Timestamp) bson.Raw {
	idx, dst := bsoncore.AppendDocumentStart(nil)
	dst = bsoncore.AppendStringElement(dst, "op", "n")
	dst = bsoncore.AppendStringElement(dst, "ns", "")
	oIdx, dst := bsoncore.AppendDocumentElementStart(dst, "o")
	dst = bsoncore.AppendStringElement(dst, "msg", "mongoferry: change stream postBatchResumeToken")
	dst, _ = bsoncore.AppendDocumentEnd(dst, oIdx)
	dst = bsoncore.AppendTimestampElement(dst, "ts", ts.T, ts.I)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// tokenTS returns the clusterTime a resume token starts with: its _data
// is a hex string whose first byte is 130 (a KeyString timestamp) followed
// by the timestamp's 8 bytes, big-endian.
func tokenTS(token bson.Raw) (bson.Timestamp, bool) {
	data, ok := bsoncore.Document(token).Lookup("_data").StringValueOK()
	if !ok || len(data) < 18 {
		return bson.Timestamp{}, false
	}
	b, err := hex.DecodeString(data[:18])
	if err != nil || b[0] != 130 {
		return bson.Timestamp{}, false
	}
	return bson.Timestamp{
		T: uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4]),
		I: uint32(b[5])<<24 | uint32(b[6])<<16 | uint32(b[7])<<8 | uint32(b[8]),
	}, true
}

// tsAfter returns the position just after ts.
func tsAfter(ts bson.Timestamp) bson.Timestamp {
	if ts.I == math.MaxUint32 {
		return bson.Timestamp{T: ts.T + 1}
	}
	return bson.Timestamp{T: ts.T, I: ts.I + 1}
}

// tsBefore returns the position just before ts (zero for zero).
func tsBefore(ts bson.Timestamp) bson.Timestamp {
	switch {
	case ts.I > 0:
		return bson.Timestamp{T: ts.T, I: ts.I - 1}
	case ts.T > 0:
		return bson.Timestamp{T: ts.T - 1, I: math.MaxUint32}
	}
	return bson.Timestamp{}
}

// event is a change event being read: its fields, checked as they are
// read.
type event struct {
	doc bsoncore.Document
	typ string
}

// malformed returns an ErrMalformedChangeEvent naming the event's type.
func (e *event) malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s event: %s", ErrMalformedChangeEvent, e.typ, fmt.Sprintf(format, args...))
}

// field returns a field and whether it is present (a null counts as
// absent).
func (e *event) field(key string) (bsoncore.Value, bool) {
	v, err := e.doc.LookupErr(key)
	if err != nil || v.Type == bsoncore.TypeNull {
		return bsoncore.Value{}, false
	}
	return v, true
}

// document returns a document field; required says whether it must be
// there.
func (e *event) document(key string, required bool) (bsoncore.Document, error) {
	v, ok := e.field(key)
	if !ok {
		if required {
			return nil, e.malformed("%s is missing", key)
		}
		return nil, nil
	}
	d, err := asDocument(v)
	if err != nil {
		return nil, e.malformed("%s: %v", key, err)
	}
	return d, nil
}

// asDocument returns v as a valid document.
func asDocument(v bsoncore.Value) (bsoncore.Document, error) {
	if v.Type != bsoncore.TypeEmbeddedDocument {
		return nil, fmt.Errorf("is a %s, not a document", v.Type)
	}
	d := bsoncore.Document(v.Data)
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// asArray returns v as a valid array.
func asArray(v bsoncore.Value) (bsoncore.Array, error) {
	if v.Type != bsoncore.TypeArray {
		return nil, fmt.Errorf("is a %s, not an array", v.Type)
	}
	a := bsoncore.Array(v.Data)
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// integer reads an int32 or int64.
func integer(v bsoncore.Value) (int64, bool) {
	switch v.Type {
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		return int64(n), ok
	case bsoncore.TypeInt64:
		return v.Int64OK()
	}
	return 0, false
}

// namespace reads ns (or to): {db, coll}; coll is required unless dbOnly.
func (e *event) namespace(key string, dbOnly bool) (db, coll string, err error) {
	ns, err := e.document(key, true)
	if err != nil {
		return "", "", err
	}
	db, ok := ns.Lookup("db").StringValueOK()
	if !ok || db == "" || strings.ContainsAny(db, ".\x00") {
		return "", "", e.malformed("%s.db must be a database name", key)
	}
	if dbOnly {
		return db, "", nil
	}
	coll, ok = ns.Lookup("coll").StringValueOK()
	if !ok || coll == "" || strings.Contains(coll, "\x00") {
		return "", "", e.malformed("%s.coll must be a collection name", key)
	}
	return db, coll, nil
}

// documentKey reads documentKey, which must hold an _id.
func (e *event) documentKey() ([]byte, error) {
	key, err := e.document("documentKey", true)
	if err != nil {
		return nil, err
	}
	if _, err := key.LookupErr("_id"); err != nil {
		return nil, e.malformed("documentKey has no _id")
	}
	return key, nil
}

// noEntry lists the operation types that change nothing a target keeps:
// sharding metadata events and transaction markers.
var noEntry = map[string]bool{
	"shardCollection": true, "reshardCollection": true, "refineCollectionShardKey": true,
	"migrateLastChunkFromShard": true, "migrateChunkToNewShard": true, "kNewShardDetected": true,
	"reshardBegin": true, "reshardBlockingWrites": true, "reshardDoneCatchUp": true,
	"endOfTransaction": true,
}

// convert reads one event. ok is false for events without an entry (c.ts
// is still set).
func convert(raw bson.Raw) (c change, ok bool, err error) {
	e := event{doc: bsoncore.Document(raw), typ: "change"}
	if err := e.doc.Validate(); err != nil {
		return change{}, false, fmt.Errorf("%w: %v", ErrMalformedChangeEvent, err)
	}
	typ, found := e.doc.Lookup("operationType").StringValueOK()
	if !found {
		return change{}, false, e.malformed("operationType is missing or not a string")
	}
	e.typ = strconv.Quote(typ)
	if typ == "invalidate" {
		return change{}, false, fmt.Errorf("%w: the server ended the stream (an invalidate event); resume the task from its checkpoint", ErrChangeStreamInvalidated)
	}
	t, i, found := e.doc.Lookup("clusterTime").TimestampOK()
	if !found {
		return change{}, false, e.malformed("clusterTime is missing or not a timestamp")
	}
	c.ts = bson.Timestamp{T: t, I: i}
	if noEntry[typ] {
		return c, false, nil
	}
	if err := e.common(&c); err != nil {
		return change{}, false, err
	}
	switch typ {
	case "insert", "update", "replace", "delete":
		err = e.crud(&c, typ)
	case "create", "drop", "rename", "dropDatabase", "createIndexes", "dropIndexes", "modify",
		"startIndexBuild", "abortIndexBuild":
		err = e.ddl(&c, typ)
	default:
		return change{}, false, fmt.Errorf("%w: operationType %q (the reader knows insert, update, replace, delete, "+
			"create, drop, rename, dropDatabase, createIndexes, dropIndexes, modify and the sharding events); "+
			"a newer server may have added it, use incremental.method oplog", ErrUnsupportedChangeEvent, typ)
	}
	if err != nil {
		return change{}, false, err
	}
	return c, true, nil
}

// common reads wallTime, collectionUUID, lsid and txnNumber.
func (e *event) common(c *change) error {
	if v, ok := e.field("wallTime"); ok {
		ms, ok := v.DateTimeOK()
		if !ok {
			return e.malformed("wallTime is a %s, not a date", v.Type)
		}
		c.wall, c.hasWall = ms, true
	}
	if v, ok := e.field("collectionUUID"); ok {
		sub, data, ok := v.BinaryOK()
		if !ok || sub != bson.TypeBinaryUUID || len(data) != 16 {
			return e.malformed("collectionUUID is not a UUID")
		}
		c.ui = data
	}
	lsid, err := e.document("lsid", false)
	if err != nil {
		return err
	}
	c.lsid = lsid
	if v, ok := e.field("txnNumber"); ok {
		n, ok := integer(v)
		if !ok {
			return e.malformed("txnNumber is a %s, not an integer", v.Type)
		}
		c.txn, c.hasTxn = n, true
	}
	return nil
}

// crud converts insert, update, replace and delete.
func (e *event) crud(c *change, typ string) error {
	db, coll, err := e.namespace("ns", false)
	if err != nil {
		return err
	}
	c.ns = db + "." + coll
	key, err := e.documentKey()
	if err != nil {
		return err
	}
	full, err := e.document("fullDocument", typ == "insert" || typ == "replace")
	if err != nil {
		return err
	}
	switch typ {
	case "insert":
		if _, err := full.LookupErr("_id"); err != nil {
			return e.malformed("fullDocument has no _id")
		}
		c.op, c.o, c.o2 = "i", full, key
	case "replace":
		c.op, c.o, c.o2 = "u", full, key
	case "delete":
		c.op, c.o = "d", key
	case "update":
		desc, err := e.document("updateDescription", true)
		if err != nil {
			return err
		}
		o, err := updateOp(desc, full)
		if err != nil {
			return fmt.Errorf("update of %s %s: %w", c.ns, bson.Raw(key), err)
		}
		c.op, c.o, c.o2 = "u", o, key
	}
	return nil
}

// ddl converts the DDL events into command entries.
func (e *event) ddl(c *change, typ string) error {
	db, coll, err := e.namespace("ns", typ == "dropDatabase")
	if err != nil {
		return err
	}
	c.op, c.ns = "c", db+".$cmd"
	desc, err := e.document("operationDescription", typ == "createIndexes" || typ == "dropIndexes")
	if err != nil {
		return err
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	switch typ {
	case "dropDatabase":
		o = bsoncore.AppendInt32Element(o, "dropDatabase", 1)
	case "drop":
		o = bsoncore.AppendStringElement(o, "drop", coll)
	case "create", "modify":
		name := map[string]string{"create": "create", "modify": "collMod"}[typ]
		if typ == "create" {
			if err := e.notTimeseries(desc, db, coll); err != nil {
				return err
			}
		}
		o = bsoncore.AppendStringElement(o, name, coll)
		o = appendFields(o, desc)
	case "rename":
		toDB, toColl, err := e.renameTarget(desc)
		if err != nil {
			return err
		}
		o = bsoncore.AppendStringElement(o, "renameCollection", db+"."+coll)
		o = bsoncore.AppendStringElement(o, "to", toDB+"."+toColl)
		if desc != nil {
			if v, err := desc.LookupErr("dropTarget"); err == nil && (v.Type == bsoncore.TypeBinary || v.Type == bsoncore.TypeBoolean) {
				o = bsoncore.AppendValueElement(o, "dropTarget", v)
			}
		}
	case "createIndexes", "startIndexBuild", "abortIndexBuild":
		name := map[string]string{"createIndexes": "commitIndexBuild"}[typ]
		if name == "" {
			name = typ
		}
		v, err := desc.LookupErr("indexes")
		if err != nil {
			return e.malformed("operationDescription.indexes is missing")
		}
		if _, err := asArray(v); err != nil {
			return e.malformed("operationDescription.indexes %v", err)
		}
		o = bsoncore.AppendStringElement(o, name, coll)
		o = bsoncore.AppendValueElement(o, "indexes", v)
	case "dropIndexes":
		names, err := e.indexNames(desc)
		if err != nil {
			return err
		}
		o = bsoncore.AppendStringElement(o, "dropIndexes", coll)
		if len(names) == 1 {
			o = bsoncore.AppendStringElement(o, "index", names[0])
		} else {
			aIdx, a := bsoncore.AppendArrayElementStart(o, "index")
			for i, n := range names {
				a = bsoncore.AppendStringElement(a, strconv.Itoa(i), n)
			}
			o, _ = bsoncore.AppendArrayEnd(a, aIdx)
		}
	}
	c.o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return nil
}

// appendFields appends every field of doc (nil: none).
func appendFields(dst []byte, doc bsoncore.Document) []byte {
	if doc == nil {
		return dst
	}
	elems, _ := doc.Elements()
	for _, el := range elems {
		dst = append(dst, el...)
	}
	return dst
}

// notTimeseries refuses the create of a time-series collection: the event
// shows it as a view on system.buckets.<coll> (with nsType "timeseries" on
// newer servers), without its time-series options.
func (e *event) notTimeseries(desc bsoncore.Document, db, coll string) error {
	nsType, _ := e.doc.Lookup("nsType").StringValueOK()
	var viewOn string
	if desc != nil {
		viewOn, _ = desc.Lookup("viewOn").StringValueOK()
	}
	if nsType == "timeseries" || strings.HasPrefix(viewOn, "system.buckets.") {
		return fmt.Errorf("%w: create of the time-series collection %s.%s: a change stream does not give its time-series options; "+
			"create it on the target by hand before the copy, or use incremental.method oplog", ErrUnsupportedChangeEvent, db, coll)
	}
	return nil
}

// renameTarget reads the new name of a rename: the top-level to, or
// operationDescription.to.
func (e *event) renameTarget(desc bsoncore.Document) (db, coll string, err error) {
	if _, ok := e.field("to"); ok {
		return e.namespace("to", false)
	}
	if desc == nil {
		return "", "", e.malformed("to is missing")
	}
	sub := event{doc: desc, typ: e.typ}
	return sub.namespace("to", false)
}

// indexNames reads the names of the indexes a dropIndexes event drops.
func (e *event) indexNames(desc bsoncore.Document) ([]string, error) {
	v, err := desc.LookupErr("indexes")
	if err != nil {
		return nil, e.malformed("operationDescription.indexes is missing")
	}
	arr, err := asArray(v)
	if err != nil {
		return nil, e.malformed("operationDescription.indexes %v", err)
	}
	vals, _ := arr.Values()
	var names []string
	for _, v := range vals {
		spec, err := asDocument(v)
		if err != nil {
			return nil, e.malformed("an index of operationDescription.indexes %v", err)
		}
		name, ok := spec.Lookup("name").StringValueOK()
		if !ok || name == "" {
			return nil, e.malformed("an index of operationDescription.indexes has no name")
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, e.malformed("operationDescription.indexes is empty")
	}
	return names, nil
}

// updateOp builds the o of an update entry from an updateDescription (see
// EventToEntry); full is the event's fullDocument, or nil.
func updateOp(desc, full bsoncore.Document) ([]byte, error) {
	d := event{doc: desc, typ: `"update"`}
	updated, err := d.document("updatedFields", false)
	if err != nil {
		return nil, err
	}
	var removed, truncated []bsoncore.Value
	for _, f := range []struct {
		key string
		out *[]bsoncore.Value
	}{{"removedFields", &removed}, {"truncatedArrays", &truncated}} {
		if v, ok := d.field(f.key); ok {
			arr, err := asArray(v)
			if err != nil {
				return nil, d.malformed("updateDescription.%s %v", f.key, err)
			}
			*f.out, _ = arr.Values()
		}
	}
	disamb, err := d.document("disambiguatedPaths", false)
	if err != nil {
		return nil, err
	}
	paths := pathSplitter{disamb: disamb}

	var (
		sets   []bsoncore.Element
		unsets []string
		truncs []truncation
	)
	if updated != nil {
		sets, _ = updated.Elements()
	}
	for _, v := range removed {
		s, ok := v.StringValueOK()
		if !ok {
			return nil, d.malformed("updateDescription.removedFields holds a %s, not a path", v.Type)
		}
		unsets = append(unsets, s)
	}
	for _, v := range truncated {
		t, err := readTruncation(v)
		if err != nil {
			return nil, d.malformed("updateDescription.truncatedArrays: %v", err)
		}
		truncs = append(truncs, t)
	}

	// Paths an update cannot name: replace by the full document, if any.
	check := func(path string) error {
		comps, err := paths.split(path)
		if err != nil {
			return d.malformed("%v", err)
		}
		for _, c := range comps {
			if !c.index && !addressable(c.name) {
				if full != nil {
					return errReplace
				}
				return fmt.Errorf("%w: %q (field %q); the change stream gives no full document to replace the document with: "+
					"set the stream's fullDocument (updateLookup or whenAvailable), or use incremental.method oplog",
					oplog.ErrUnaddressablePath, path, c.name)
			}
		}
		return nil
	}
	all := make([]string, 0, len(sets)+len(unsets)+len(truncs))
	for _, el := range sets {
		all = append(all, el.Key())
	}
	all = append(all, unsets...)
	for _, t := range truncs {
		all = append(all, t.path)
	}
	for _, p := range all {
		if err := check(p); err == errReplace {
			return full, nil
		} else if err != nil {
			return nil, err
		}
	}

	if len(truncs) > 0 {
		return diffUpdate(paths, sets, unsets, truncs)
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	o = bsoncore.AppendInt32Element(o, "$v", 1)
	if len(sets) > 0 {
		o = bsoncore.AppendDocumentElement(o, "$set", updated)
	}
	if len(unsets) > 0 {
		uIdx, u := bsoncore.AppendDocumentElementStart(o, "$unset")
		for _, p := range unsets {
			u = bsoncore.AppendBooleanElement(u, p, true)
		}
		o, _ = bsoncore.AppendDocumentEnd(u, uIdx)
	}
	o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return o, nil
}

// errReplace tells updateOp to use the full document.
var errReplace = errors.New("replace by the full document")

// addressable reports whether a field name can be part of an update path.
func addressable(name string) bool {
	return name != "" && !strings.Contains(name, ".") && name[0] != '$'
}

// truncation is one entry of truncatedArrays.
type truncation struct {
	path string
	size int32
}

func readTruncation(v bsoncore.Value) (truncation, error) {
	doc, err := asDocument(v)
	if err != nil {
		return truncation{}, err
	}
	path, ok := doc.Lookup("field").StringValueOK()
	if !ok {
		return truncation{}, fmt.Errorf("field must be a path")
	}
	n, ok := integer(doc.Lookup("newSize"))
	if !ok || n < 0 || n > math.MaxInt32 {
		return truncation{}, fmt.Errorf("newSize of %q must be a length between 0 and 2^31-1", path)
	}
	return truncation{path: path, size: int32(n)}, nil
}

// component is one field of a path; index marks an array index.
type component struct {
	name  string
	index bool
}

// pathSplitter splits the dotted paths of an updateDescription into
// fields, from disambiguatedPaths when it lists the path.
type pathSplitter struct {
	disamb bsoncore.Document
}

func (p pathSplitter) split(path string) ([]component, error) {
	if strings.Contains(path, "\x00") {
		return nil, fmt.Errorf("path %q contains a NUL byte", path)
	}
	if p.disamb != nil {
		if v, err := p.disamb.LookupErr(path); err == nil {
			arr, err := asArray(v)
			if err != nil {
				return nil, fmt.Errorf("disambiguatedPaths of %q %v", path, err)
			}
			vals, _ := arr.Values()
			if len(vals) == 0 {
				return nil, fmt.Errorf("disambiguatedPaths of %q is empty", path)
			}
			comps := make([]component, len(vals))
			for i, v := range vals {
				if s, ok := v.StringValueOK(); ok && !strings.Contains(s, "\x00") {
					comps[i] = component{name: s}
				} else if n, ok := integer(v); ok && n >= 0 && n <= math.MaxInt32 {
					comps[i] = component{name: strconv.FormatInt(n, 10), index: true}
				} else {
					return nil, fmt.Errorf("disambiguatedPaths of %q holds a %s, not a field name or an index", path, v.Type)
				}
			}
			return comps, nil
		}
	}
	parts := strings.Split(path, ".")
	comps := make([]component, len(parts))
	for i, s := range parts {
		comps[i] = component{name: s}
	}
	return comps, nil
}

// isIndex reports whether s is an array index as MongoDB writes one:
// decimal digits, no leading zero, at most 2^31-1.
func isIndex(s string) bool {
	if s == "" || len(s) > 10 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n <= math.MaxInt32
}

// pathNode is a node of the tree a $v:2 diff is built from.
type pathNode struct {
	name     string
	kids     []*pathNode
	byName   map[string]*pathNode
	val      bsoncore.Value
	set      bool // updatedFields: u
	unset    bool // removedFields: d (u<n>: null in an array)
	truncate bool // truncatedArrays: an array diff with l
	size     int32
}

// walk returns the node at path, creating it.
func (n *pathNode) walk(path string, comps []component) (*pathNode, error) {
	for _, c := range comps {
		if n.set || n.unset {
			return nil, fmt.Errorf("%w: update path %q goes through a field the same update sets or removes", ErrMalformedChangeEvent, path)
		}
		if n.truncate && !isIndex(c.name) {
			return nil, fmt.Errorf("%w: update path %q goes through the truncated array %q with %q, not an index", ErrMalformedChangeEvent, path, n.name, c.name)
		}
		kid := n.byName[c.name]
		if kid == nil {
			kid = &pathNode{name: c.name}
			if n.byName == nil {
				n.byName = map[string]*pathNode{}
			}
			n.byName[c.name] = kid
			n.kids = append(n.kids, kid)
		}
		n = kid
	}
	return n, nil
}

// diffUpdate builds {$v: 2, diff} from an updateDescription with
// truncatedArrays.
func diffUpdate(paths pathSplitter, sets []bsoncore.Element, unsets []string, truncs []truncation) ([]byte, error) {
	root := &pathNode{}
	leaf := func(path string) (*pathNode, error) {
		comps, err := paths.split(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformedChangeEvent, err)
		}
		n, err := root.walk(path, comps)
		if err != nil {
			return nil, err
		}
		if n.set || n.unset || n.truncate || len(n.kids) > 0 {
			return nil, fmt.Errorf("%w: the update names %q twice, or with a field inside it", ErrMalformedChangeEvent, path)
		}
		return n, nil
	}
	// Arrays first, so that the paths through them are known to be indexes.
	for _, t := range truncs {
		n, err := leaf(t.path)
		if err != nil {
			return nil, err
		}
		n.truncate, n.size = true, t.size
	}
	for _, el := range sets {
		n, err := leaf(el.Key())
		if err != nil {
			return nil, err
		}
		n.set, n.val = true, el.Value()
	}
	for _, p := range unsets {
		n, err := leaf(p)
		if err != nil {
			return nil, err
		}
		n.unset = true
	}
	idx, o := bsoncore.AppendDocumentStart(nil)
	o = bsoncore.AppendInt32Element(o, "$v", 2)
	o = bsoncore.AppendDocumentElement(o, "diff", root.appendDiff(nil))
	o, _ = bsoncore.AppendDocumentEnd(o, idx)
	return o, nil
}

// appendDiff appends the sub-diff of a node: an array diff for a
// truncated array, else a document diff.
func (n *pathNode) appendDiff(dst []byte) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	if n.truncate {
		dst = bsoncore.AppendBooleanElement(dst, "a", true)
		dst = bsoncore.AppendInt32Element(dst, "l", n.size)
		for _, k := range n.kids {
			switch {
			case k.set:
				dst = bsoncore.AppendValueElement(dst, "u"+k.name, k.val)
			case k.unset:
				// $unset of an element leaves null.
				dst = bsoncore.AppendNullElement(dst, "u"+k.name)
			default:
				dst = bsoncore.AppendDocumentElement(dst, "s"+k.name, k.appendDiff(nil))
			}
		}
	} else {
		dst = n.appendSection(dst, "u", func(k *pathNode) bool { return k.set })
		dst = n.appendSection(dst, "d", func(k *pathNode) bool { return k.unset })
		for _, k := range n.kids {
			if !k.set && !k.unset {
				dst = bsoncore.AppendDocumentElement(dst, "s"+k.name, k.appendDiff(nil))
			}
		}
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// appendSection appends a u or d section with the kids it selects, if any.
func (n *pathNode) appendSection(dst []byte, name string, sel func(*pathNode) bool) []byte {
	var (
		idx  int32
		open bool
	)
	for _, k := range n.kids {
		if !sel(k) {
			continue
		}
		if !open {
			idx, dst = bsoncore.AppendDocumentElementStart(dst, name)
			open = true
		}
		if name == "u" {
			dst = bsoncore.AppendValueElement(dst, k.name, k.val)
		} else {
			dst = bsoncore.AppendBooleanElement(dst, k.name, false)
		}
	}
	if open {
		dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	}
	return dst
}
