package source

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
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
	// operators (see oplog.EventToEntry). It costs a lookup (updateLookup) or
	// pre- and post-images on the source's collections.
	FullDocument options.FullDocument
}

// ChangeStreamReader is the OplogReader of incremental.method:
// changeStream. It watches the whole source deployment with
// showExpandedEvents and returns each event as the oplog entry the server
// wrote for it (oplog.EventToEntry). Events sharing a clusterTime (a
// transaction, a batched write) come back as one applyOps entry, so no two
// entries share a ts; an idle stream yields no-op entries so the
// checkpoint moves on; after an error it resumes after the last entry
// returned. Why and how: docs/oplog-shapes.md, "The reader: position,
// transactions, idle sources". It is not safe for concurrent use, except
// Newest, Position and ResumeToken.
type ChangeStreamReader struct {
	client *mongo.Client
	opts   ChangeStreamOptions
	cs     *mongo.ChangeStream
	group  oplog.EventGroup
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
	r.group = oplog.EventGroup{}
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
	var b csBatch
	idle, batchEnd, err := r.readBatch(ctx, &b)
	switch {
	case err != nil:
		// Re-open after the last entry returned; held events are read again.
		_ = r.Close(context.WithoutCancel(ctx))
		if len(b.out) == 0 {
			return nil, err
		}
		r.stashed = err
	case r.cs.ID() == 0:
		_ = r.Close(context.WithoutCancel(ctx))
	case idle || batchEnd:
		r.endBatch(&b, idle)
	}
	r.mu.Lock()
	if b.token != nil {
		r.token = b.token
	}
	if len(b.out) > 0 {
		r.last = b.lastTS
	}
	r.mu.Unlock()
	return b.out, nil
}

// csBatch is what one Next call hands out: the entries, the resume token
// after them and the last entry's ts.
type csBatch struct {
	out    []bson.Raw
	token  bson.Raw // the position after out
	lastTS bson.Timestamp
}

func (b *csBatch) emit(entry bson.Raw, ts bson.Timestamp, tok bson.Raw) {
	b.out, b.lastTS, b.token = append(b.out, entry), ts, tok
}

// readBatch reads one batch (a getMore's worth, at most BatchEvents):
// what it completes is returned at once rather than held for more events.
// idle says the stream had nothing more, batchEnd that the batch ended.
func (r *ChangeStreamReader) readBatch(ctx context.Context, b *csBatch) (idle, batchEnd bool, err error) {
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
		c, ok, cerr := oplog.ConvertEvent(event)
		if cerr != nil {
			return idle, batchEnd, fmt.Errorf("change event after %s: %w", r.describe(), cerr)
		}
		r.noteNewest(c.TS())
		if !ok {
			// Nothing to apply: it only closes a group of another ts.
			if !r.group.Empty() && r.group.TS() != c.TS() {
				b.emit(r.group.Flush())
			}
			if r.group.Empty() {
				b.token = bson.Raw(id)
			}
			continue
		}
		if entry, ts, tok, done := r.group.Add(c, id); done {
			b.emit(entry, ts, tok)
		}
	}
	if serr := r.cs.Err(); serr != nil {
		return idle, batchEnd, r.streamError("read change stream", serr)
	}
	return idle, batchEnd, nil
}

// endBatch closes a batch at its end or when the stream is idle. At the
// end of a batch the driver's resume token is the postBatchResumeToken:
// every event before its clusterTime is read, so a held group completes
// and a no-op entry just below that time carries the position forward.
func (r *ChangeStreamReader) endBatch(b *csBatch, idle bool) {
	pbrt := r.cs.ResumeToken()
	pts, known := tokenTS(pbrt)
	if known {
		r.noteNewest(pts)
	}
	if !r.group.Empty() && (idle || (known && pts.After(r.group.TS()))) {
		b.emit(r.group.Flush())
	}
	if !r.group.Empty() || pbrt == nil {
		return
	}
	b.token = bytes.Clone(pbrt)
	prev := b.lastTS
	if len(b.out) == 0 {
		prev = r.Position()
	}
	if below := tsBefore(pts); known && below.After(prev) {
		b.emit(noopEntry(below), below, b.token)
	}
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
