package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// ErrPassRunning is returned by Streamer.Run while another pass runs.
var ErrPassRunning = errors.New("a streaming verification pass is already running")

// Defaults of StreamOptions.
const (
	DefaultStreamBatch    = 500
	DefaultMaxFindings    = 100
	DefaultRecheckPoll    = time.Second
	DefaultRecheckMaxWait = 10 * time.Minute
)

// StreamOptions tunes a Streamer.
type StreamOptions struct {
	// Positions says where the source and replay are (required).
	Positions Positions
	// Rechecks is how many rechecks a mismatch must survive to be
	// reported (config.Verify.Rechecks; 1 when zero).
	Rechecks int
	// MaxPendingBytes is the byte budget of the mismatches waiting for a
	// recheck (config.Verify.MaxPendingBytes).
	MaxPendingBytes int64
	// Batch is the documents compared per batch (DefaultStreamBatch).
	Batch int
	// MaxFindings caps the persisting mismatches listed in the status
	// (DefaultMaxFindings); all are counted.
	MaxFindings int
	// Poll is how often a pass waiting for replay asks Positions again
	// (DefaultRecheckPoll).
	Poll time.Duration
	// MaxWait is how long a pass waits at its end for replay to pass the
	// last pending mismatches (DefaultRecheckMaxWait); those it could not
	// recheck are counted as unsettled.
	MaxWait time.Duration
}

// Finding is a mismatch that persisted through every recheck: its source
// namespace, _id (canonical extended JSON) and kind (missing, extra,
// changed). It is the worker contract's type.
type Finding = workerapi.VerifyFinding

// StreamStatus is a streaming verification pass's progress and findings,
// a value snapshot: the worker contract's /status section
// (workerapi.StreamingVerify), so the two cannot drift apart.
type StreamStatus = workerapi.StreamingVerify

// Streamer runs streaming verification passes: every document compared
// by _id in batches while the source keeps changing, each mismatch
// compared again once replay has passed the source's position from when
// it was seen, and reported only when it persists through every
// recheck. It keeps _ids and positions, never documents, within
// MaxPendingBytes. One pass runs at a time; Status is safe to call at any
// time.
type Streamer struct {
	clients [2]*mongo.Client
	opts    StreamOptions

	run sync.Mutex // held by a running pass
	mu  sync.Mutex
	st  StreamStatus
}

// NewStreamer returns a Streamer comparing target with source.
func NewStreamer(source, target *mongo.Client, opts StreamOptions) *Streamer {
	if opts.Rechecks <= 0 {
		opts.Rechecks = 1
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultStreamBatch
	}
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = DefaultMaxFindings
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultRecheckPoll
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultRecheckMaxWait
	}
	return &Streamer{clients: [2]*mongo.Client{source, target}, opts: opts}
}

// Status returns a snapshot of the last (or current) pass.
func (s *Streamer) Status() StreamStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Findings = slices.Clone(s.st.Findings)
	return st
}

// Running reports whether a pass runs.
func (s *Streamer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Running
}

// update changes the status under the lock.
func (s *Streamer) update(fn func(st *StreamStatus)) {
	s.mu.Lock()
	fn(&s.st)
	s.mu.Unlock()
}

// Run runs one pass over colls and returns its final status; it fails
// with ErrPassRunning while another pass runs. Views are skipped.
func (s *Streamer) Run(ctx context.Context, colls []catalog.Collection) (StreamStatus, error) {
	run, err := s.Reserve()
	if err != nil {
		return s.Status(), err
	}
	return run(ctx, colls)
}

// Reserve takes the streamer for one pass, or fails with ErrPassRunning
// while another pass runs or is reserved: a caller that answers "started"
// before the pass runs (POST /verify) knows then that it will. The
// returned function runs the pass as Run does and releases the streamer;
// it must be called once.
func (s *Streamer) Reserve() (func(context.Context, []catalog.Collection) (StreamStatus, error), error) {
	if !s.run.TryLock() {
		return nil, ErrPassRunning
	}
	return s.runReserved, nil
}

func (s *Streamer) runReserved(ctx context.Context, colls []catalog.Collection) (StreamStatus, error) {
	defer s.run.Unlock()
	colls = slices.DeleteFunc(slices.Clone(colls), func(c catalog.Collection) bool { return !c.Copyable() })
	p := &pass{s: s, colls: colls, pending: newPendingSet(s.opts.MaxPendingBytes, s.opts.Rechecks)}
	s.update(func(st *StreamStatus) {
		passes := st.Passes
		*st = StreamStatus{Running: true, Passes: passes, StartedAt: time.Now(), Namespaces: len(colls), MaxPendingBytes: s.opts.MaxPendingBytes}
	})
	err := p.run(ctx)
	s.update(func(st *StreamStatus) {
		st.Running, st.FinishedAt, st.CurrentNamespace = false, time.Now(), ""
		st.Passes++
		p.syncPending(st)
		if err != nil {
			st.Error = err.Error()
		}
		st.OK = err == nil && st.Persisting == 0 && st.NotRechecked == 0 && st.Unsettled == 0
	})
	return s.Status(), err
}

// pass is one run over every namespace.
type pass struct {
	s       *Streamer
	colls   []catalog.Collection
	pending *pendingSet
}

func (p *pass) syncPending(st *StreamStatus) {
	st.PendingRechecks, st.PendingBytes = p.pending.len(), p.pending.bytes
	st.PendingFull, st.NotRechecked = p.pending.full, p.pending.overflow
}

func (p *pass) run(ctx context.Context) error {
	for i, c := range p.colls {
		p.s.update(func(st *StreamStatus) { st.CurrentNamespace = c.Source.String() })
		if err := p.namespace(ctx, i); err != nil {
			return fmt.Errorf("streaming verify %s: %w", c.Source, err)
		}
		p.s.update(func(st *StreamStatus) { st.NamespacesDone++ })
	}
	p.s.update(func(st *StreamStatus) { st.CurrentNamespace = "" })
	// Wait for replay to pass what is still pending.
	deadline := time.Now().Add(p.s.opts.MaxWait)
	for p.pending.len() > 0 {
		if err := p.recheckDue(ctx); err != nil {
			return err
		}
		if p.pending.len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			n := p.pending.drop()
			p.s.update(func(st *StreamStatus) { st.Unsettled += int64(n); p.syncPending(st) })
			return nil
		}
		select {
		case <-ctx.Done():
			n := p.pending.drop()
			p.s.update(func(st *StreamStatus) { st.Unsettled += int64(n); p.syncPending(st) })
			return ctx.Err()
		case <-time.After(p.s.opts.Poll):
		}
	}
	return nil
}

func (p *pass) coll(i int, s side) *mongo.Collection {
	ns := p.colls[i].Source
	if s == targetSide {
		ns = p.colls[i].Target
	}
	return p.s.clients[s].Database(ns.DB).Collection(ns.Coll)
}

// namespace compares collection i: the source's documents in batches
// with the target's of the same _ids, then the target's _ids with the
// source's, for documents on the target only.
func (p *pass) namespace(ctx context.Context, i int) error {
	if err := p.scan(ctx, i, sourceToTarget); err != nil {
		return err
	}
	return p.scan(ctx, i, targetToSource)
}

// direction is what one of a namespace's two scans reads and how it
// compares: the side it scans, whether both sides are read as _ids only,
// whether the scanned documents count as compared, and compare, which
// says how the other side's document (nil when absent) differs from the
// scanned one, or 0.
type direction struct {
	from    side
	idOnly  bool
	counted bool
	compare func(scanned, other bson.Raw) diffKind
}

var (
	// sourceToTarget compares every source document with the target's.
	sourceToTarget = direction{from: sourceSide, counted: true, compare: compareDocs}
	// targetToSource finds the _ids that are on the target only.
	targetToSource = direction{from: targetSide, idOnly: true, compare: func(_, src bson.Raw) diffKind {
		if src == nil {
			return kindExtra
		}
		return 0
	}}
)

// other returns the side a scan of d looks documents up on.
func (d direction) other() side {
	if d.from == sourceSide {
		return targetSide
	}
	return sourceSide
}

// scan reads collection i on d's side in batches, fetches the same _ids
// on the other side, and records what d.compare finds differing, at the
// position the source was at after the fetch.
func (p *pass) scan(ctx context.Context, i int, d direction) error {
	var opts *options.FindOptionsBuilder
	if d.idOnly {
		opts = options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}})
	}
	return p.scanBatches(ctx, i, d.from, opts, p.s.opts.Batch, func(docs []bson.Raw) error {
		keys, scanned, err := keyed(docs)
		if err != nil {
			return err
		}
		got, err := p.fetch(ctx, i, d.other(), keys, d.idOnly)
		if err != nil {
			return err
		}
		at, err := p.s.opts.Positions.Now(ctx)
		if err != nil {
			return err
		}
		var diffs []pendingKey
		var kinds []diffKind
		for _, k := range keys {
			if kind := d.compare(scanned[k], got[k]); kind != 0 {
				diffs, kinds = append(diffs, pendingKey{ns: i, id: k}), append(kinds, kind)
			}
		}
		var compared int64
		if d.counted {
			compared = int64(len(keys))
		}
		return p.record(ctx, diffs, kinds, at, compared)
	})
}

// record adds first-seen mismatches to the pending set, rechecking what
// is due first when the set is full, and counts compared documents.
func (p *pass) record(ctx context.Context, keys []pendingKey, kinds []diffKind, at Position, compared int64) error {
	for j, k := range keys {
		if !p.pending.room(k) {
			// Make room by rechecking what replay has passed; what still
			// does not fit is counted as not rechecked.
			if err := p.recheckDue(ctx); err != nil {
				return err
			}
		}
		p.pending.add(k, kinds[j], at)
	}
	p.s.update(func(st *StreamStatus) {
		st.Compared += compared
		st.Mismatches += int64(len(keys))
		p.syncPending(st)
	})
	if len(keys) > 0 || p.pending.len() > 0 {
		return p.recheckDue(ctx)
	}
	return nil
}

// recheckDue compares again every pending mismatch replay has passed.
func (p *pass) recheckDue(ctx context.Context) error {
	var askErr error
	due := p.pending.due(func(at Position) bool {
		if askErr != nil {
			return false
		}
		ok, err := p.s.opts.Positions.Passed(ctx, at)
		askErr = err
		return ok
	}, 0)
	if askErr != nil {
		return askErr
	}
	for len(due) > 0 {
		// One namespace, one batch at a time.
		n := 1
		for n < len(due) && n < p.s.opts.Batch && due[n].ns == due[0].ns {
			n++
		}
		chunk := due[:n]
		due = due[n:]
		i := chunk[0].ns
		keys := make([]idKey, len(chunk))
		for j, k := range chunk {
			keys[j] = k.id
		}
		src, err := p.fetch(ctx, i, sourceSide, keys, false)
		if err != nil {
			return err
		}
		tgt, err := p.fetch(ctx, i, targetSide, keys, false)
		if err != nil {
			return err
		}
		at, err := p.s.opts.Positions.Now(ctx)
		if err != nil {
			return err
		}
		var found []Finding
		var resolved, persisting int64
		for _, k := range chunk {
			now := compareDocs(src[k.id], tgt[k.id])
			if now == 0 {
				resolved++
			}
			if kind := p.pending.settle(k, now, at); kind != 0 {
				persisting++
				found = append(found, Finding{Namespace: p.colls[i].Source.String(), ID: k.id.String(), Kind: kind.String()})
			}
		}
		p.s.update(func(st *StreamStatus) {
			st.Rechecked += int64(len(chunk))
			st.Resolved += resolved
			st.Persisting += persisting
			room := max(p.s.opts.MaxFindings-len(st.Findings), 0)
			st.Findings = append(st.Findings, found[:min(room, len(found))]...)
			p.syncPending(st)
		})
	}
	return nil
}

// compareDocs returns how the target's document differs from the
// source's (nil for absent), or 0 when they are equal (both absent
// included).
func compareDocs(src, tgt bson.Raw) diffKind {
	switch {
	case src == nil && tgt == nil:
		return 0
	case tgt == nil:
		return kindMissing
	case src == nil:
		return kindExtra
	case !bytes.Equal(src, tgt):
		return kindChanged
	}
	return 0
}

// keyed returns the _id keys of docs that have an _id (others cannot be
// looked up), and the documents by key.
func keyed(docs []bson.Raw) ([]idKey, map[idKey]bson.Raw, error) {
	keys := make([]idKey, 0, len(docs))
	by := make(map[idKey]bson.Raw, len(docs))
	for _, d := range docs {
		k, err := keyOf(d)
		if err != nil {
			return nil, nil, err
		}
		if _, ok := k.rawValue(); !ok {
			continue
		}
		keys = append(keys, k)
		by[k] = d
	}
	return keys, by, nil
}

// fetch reads the documents of the given _ids on one side (only their
// _ids with idOnly; on the source, those its filter keeps: byID), keyed
// by their exact _id bytes: a document whose _id
// only compares equal (int64 1 for int32 1) is not the same key.
func (p *pass) fetch(ctx context.Context, i int, s side, keys []idKey, idOnly bool) (map[idKey]bson.Raw, error) {
	out := make(map[idKey]bson.Raw, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	opts := options.Find().SetBatchSize(int32(min(len(keys), 10000))) //nolint:gosec // G115: bounded above
	if idOnly {
		opts.SetProjection(bson.D{{Key: "_id", Value: 1}})
	}
	cur, err := p.coll(i, s).Find(ctx, byID(p.colls[i], s, keys), opts)
	if err != nil {
		return nil, fmt.Errorf("read %s documents by _id: %w", s, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		k, err := keyOf(cur.Current)
		if err != nil {
			return nil, err
		}
		out[k] = slices.Clone(cur.Current)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s documents by _id: %w", s, err)
	}
	return out, nil
}

// scanBatches reads the documents of collection i on side s (query) and
// hands them to fn batch documents at a time (copies, valid after the
// call).
func (p *pass) scanBatches(ctx context.Context, i int, s side, opts *options.FindOptionsBuilder, batch int, fn func([]bson.Raw) error) error {
	if opts == nil {
		opts = options.Find()
	}
	cur, err := p.coll(i, s).Find(ctx, query(p.colls[i], s), opts.SetBatchSize(int32(batch))) //nolint:gosec // G115: a configured batch size
	if err != nil {
		return fmt.Errorf("scan %s: %w", s, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	docs := make([]bson.Raw, 0, batch)
	for cur.Next(ctx) {
		docs = append(docs, slices.Clone(cur.Current))
		if len(docs) == batch {
			if err := fn(docs); err != nil {
				return err
			}
			docs = docs[:0]
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("scan %s: %w", s, err)
	}
	if len(docs) > 0 {
		return fn(docs)
	}
	return nil
}
