package rangelease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// Collection holds the range leases and done records, in the task's
// checkpoint database on the target.
const Collection = checkpoint.RangeLeasesCollection

// ErrLeaseLost means another worker took the range over (this worker
// stopped renewing for the TTL) or recorded it done first: stop copying
// it; what was written is the same documents and does no harm.
var ErrLeaseLost = errors.New("range lease lost to another worker")

// Options say who claims and how long a silent holder keeps a range.
type Options struct {
	// Task scopes the records; Owner names the worker (pod or host) in
	// them.
	Task, Owner string
	// TTL is how long a lease may go unrenewed, as a claimant sees it on
	// its own clock, before it is taken over; renew several times within.
	TTL time.Duration
}

// leaseDoc is one attempt's lease of a range, or (Done) the range's
// done record (see leaseID and doneID for their _ids).
type leaseDoc struct {
	ID      string    `bson:"_id"`
	Task    string    `bson:"task"`
	Range   string    `bson:"range"`
	Attempt int       `bson:"attempt"`
	Owner   string    `bson:"owner"`
	Token   string    `bson:"token"`
	Beat    int64     `bson:"beat"`
	At      time.Time `bson:"at"`
	Done    bool      `bson:"done"`
	Docs    int64     `bson:"docs,omitempty"`
	Bytes   int64     `bson:"bytes,omitempty"`
}

// Lease is a claimed range.
type Lease struct {
	Range   string
	Attempt int
	// TakenOver is set when an earlier attempt's holder went silent.
	TakenOver bool
	token     string
	beat      int64
}

// Leaser claims, renews and finishes ranges for one worker.
type Leaser struct {
	coll *mongo.Collection
	o    Options
	mu   sync.Mutex
	seen map[string]sighting // by lease _id
}

// sighting is when this worker first saw a lease at a beat.
type sighting struct {
	beat int64
	at   time.Time
}

// New returns a Leaser storing its records in db.
func New(db *mongo.Database, o Options) *Leaser {
	return &Leaser{coll: db.Collection(Collection), o: o, seen: map[string]sighting{}}
}

// leaseID is the _id of a range's lease for one attempt, and doneID that of
// its done record: both begin with the task's name, so that two tasks
// keeping their checkpoints in one database (the same namespace, hence the
// same range ids) never take each other's ranges.
func (l *Leaser) leaseID(rangeID string, attempt int) string {
	return fmt.Sprintf("%s/%s#%d", l.o.Task, rangeID, attempt)
}

func (l *Leaser) doneID(rangeID string) string { return l.o.Task + "/" + rangeID + "#done" }

func token() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Claim leases the first of ranges that is not done and not held by a
// live worker, and returns it, or nil with the number of ranges still
// not done (0: every range is done; otherwise wait and claim again, a
// silent holder's range becomes claimable after the TTL).
func (l *Leaser) Claim(ctx context.Context, ranges []string) (*Lease, int, error) {
	done, err := l.doneSet(ctx)
	if err != nil {
		return nil, 0, err
	}
	open := 0
	for _, id := range ranges {
		if done[id] {
			continue
		}
		open++
		lease, err := l.tryClaim(ctx, id)
		if err != nil {
			return nil, open, err
		}
		if lease != nil {
			return lease, open, nil
		}
	}
	return nil, open, nil
}

// doneSet returns the ranges recorded done.
func (l *Leaser) doneSet(ctx context.Context) (map[string]bool, error) {
	recs, err := l.Done(ctx)
	out := make(map[string]bool, len(recs))
	for id := range recs {
		out[id] = true
	}
	return out, err
}

// tryClaim claims range id's next attempt when its last lease is missing
// or was seen unrenewed for the TTL; nil when it is held or another
// claimant won.
func (l *Leaser) tryClaim(ctx context.Context, id string) (*Lease, error) {
	var last leaseDoc
	err := l.coll.FindOne(ctx, bson.D{{Key: "task", Value: l.o.Task}, {Key: "range", Value: id}, {Key: "done", Value: false}},
		options.FindOne().SetSort(bson.D{{Key: "attempt", Value: -1}})).Decode(&last)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return nil, fmt.Errorf("rangelease: read the lease of %s: %w", id, err)
	case !l.silent(last):
		return nil, nil
	}
	lease := &Lease{Range: id, Attempt: last.Attempt + 1, TakenOver: last.Attempt > 0, token: token()}
	doc := leaseDoc{ID: l.leaseID(id, lease.Attempt), Task: l.o.Task, Range: id, Attempt: lease.Attempt,
		Owner: l.o.Owner, Token: lease.token, At: time.Now().UTC()}
	if _, err := l.coll.InsertOne(ctx, doc); mongo.IsDuplicateKeyError(err) {
		return nil, nil // another claimant's attempt
	} else if err != nil {
		return nil, fmt.Errorf("rangelease: claim %s: %w", id, err)
	}
	// A holder that finished between our read and our insert: give
	// the attempt back.
	if n, err := l.coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: l.doneID(id)}}); err != nil || n > 0 {
		_, _ = l.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: doc.ID}, {Key: "token", Value: lease.token}})
		if err != nil {
			return nil, fmt.Errorf("rangelease: claim %s: %w", id, err)
		}
		return nil, nil
	}
	return lease, nil
}

// silent reports whether this worker has seen lease d at the same beat
// for the TTL.
func (l *Leaser) silent(d leaseDoc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.seen[d.ID]
	if !ok || s.beat != d.Beat {
		l.seen[d.ID] = sighting{beat: d.Beat, at: time.Now()}
		return false
	}
	return time.Since(s.at) >= l.o.TTL
}

// Renew tells claimants the holder lives. It fails with ErrLeaseLost
// once a later attempt exists: the holder went silent for the TTL and
// another worker took the range.
func (l *Leaser) Renew(ctx context.Context, lease *Lease) error {
	lease.beat++
	if _, err := l.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: l.leaseID(lease.Range, lease.Attempt)}, {Key: "token", Value: lease.token}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "beat", Value: lease.beat}, {Key: "at", Value: time.Now().UTC()}}}}); err != nil {
		return fmt.Errorf("rangelease: renew %s: %w", lease.Range, err)
	}
	return l.check(ctx, lease)
}

// Check fails with ErrLeaseLost when a later attempt of the range exists:
// a holder checks before each write, so that one frozen past the TTL
// (its range taken over) does not write its stale documents after the
// range's next attempt.
func (l *Leaser) Check(ctx context.Context, lease *Lease) error { return l.check(ctx, lease) }

// check fails with ErrLeaseLost when a later attempt of the range exists.
func (l *Leaser) check(ctx context.Context, lease *Lease) error {
	n, err := l.coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: l.leaseID(lease.Range, lease.Attempt+1)}})
	if err != nil {
		return fmt.Errorf("rangelease: check %s: %w", lease.Range, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %s, attempt %d", ErrLeaseLost, lease.Range, lease.Attempt+1)
	}
	return nil
}

// Finish records the range done with its documents and their bytes, once:
// it fails with ErrLeaseLost when another attempt exists or recorded it
// first.
func (l *Leaser) Finish(ctx context.Context, lease *Lease, docs, bytes int64) error {
	if err := l.check(ctx, lease); err != nil {
		return err
	}
	doc := leaseDoc{ID: l.doneID(lease.Range), Task: l.o.Task, Range: lease.Range, Attempt: lease.Attempt,
		Owner: l.o.Owner, Token: lease.token, At: time.Now().UTC(), Done: true, Docs: docs, Bytes: bytes}
	if _, err := l.coll.InsertOne(ctx, doc); mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("%w: %s was recorded done by another attempt", ErrLeaseLost, lease.Range)
	} else if err != nil {
		return fmt.Errorf("rangelease: finish %s: %w", lease.Range, err)
	}
	return nil
}

// Done returns the done records of the task: each range once, with the
// attempt and owner that copied it.
func (l *Leaser) Done(ctx context.Context) (map[string]Record, error) {
	cur, err := l.coll.Find(ctx, bson.D{{Key: "task", Value: l.o.Task}, {Key: "done", Value: true}})
	if err != nil {
		return nil, fmt.Errorf("rangelease: read done ranges: %w", err)
	}
	var docs []leaseDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("rangelease: read done ranges: %w", err)
	}
	out := make(map[string]Record, len(docs))
	for _, d := range docs {
		out[d.Range] = Record{Attempt: d.Attempt, Owner: d.Owner, Docs: d.Docs, Bytes: d.Bytes}
	}
	return out, nil
}

// Record is a range's done record.
type Record struct {
	Attempt int
	Owner   string
	// Docs and Bytes are what the attempt that recorded it wrote (Bytes
	// is 0 in records written before it was kept).
	Docs, Bytes int64
}

// Holder is the latest lease of a range not recorded done: who holds it
// and when it last said it lives (on its own clock).
type Holder struct {
	Range, Owner string
	Attempt      int
	Beat         int64
	RenewedAt    time.Time
}

// String names the holder for a log line: range, owner, attempt and the
// age of its last renewal.
func (h Holder) String() string {
	return fmt.Sprintf("%s held by %s (attempt %d, renewed %s ago)", h.Range, h.Owner, h.Attempt, time.Since(h.RenewedAt).Round(time.Second))
}

// Held returns the latest lease of each of ranges that is not recorded
// done, in the order of ranges; a range never claimed has none.
func (l *Leaser) Held(ctx context.Context, ranges []string) ([]Holder, error) {
	done, err := l.doneSet(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := l.coll.Find(ctx, bson.D{{Key: "task", Value: l.o.Task}, {Key: "done", Value: false}})
	if err != nil {
		return nil, fmt.Errorf("rangelease: read the leases: %w", err)
	}
	var docs []leaseDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("rangelease: read the leases: %w", err)
	}
	last := map[string]leaseDoc{}
	for _, d := range docs {
		if prev, ok := last[d.Range]; !ok || d.Attempt > prev.Attempt {
			last[d.Range] = d
		}
	}
	var out []Holder
	for _, id := range ranges {
		if d, ok := last[id]; ok && !done[id] {
			out = append(out, Holder{Range: id, Owner: d.Owner, Attempt: d.Attempt, Beat: d.Beat, RenewedAt: d.At})
		}
	}
	return out, nil
}
