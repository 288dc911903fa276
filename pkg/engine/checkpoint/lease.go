package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// LeasesCollection holds one lease per running task (or shard subtask):
// the run that holds it renews it, so that a second run of the same task
// finds it and stops before it writes anything.
const LeasesCollection = "leases"

// ErrTaskRunning means another run of the task holds its lease.
var ErrTaskRunning = errors.New("the task is running elsewhere")

// Holder names a run: the pod or host it runs on and its process id.
type Holder struct {
	Name string `bson:"name"`
	PID  int    `bson:"pid"`
}

// leaseDoc is a lease as stored. Beat counts renewals: a run that waits
// for a lease sees it change while its holder lives, which needs no clock
// shared between hosts.
type leaseDoc struct {
	ID     string    `bson:"_id"`
	Task   string    `bson:"task"`
	Holder Holder    `bson:"holder"`
	Token  string    `bson:"token"`
	Beat   int64     `bson:"beat"`
	At     time.Time `bson:"at"`
}

// Lease is a held lease; Renew keeps it, Release gives it up.
type Lease struct {
	s     *Store
	id    string
	token string
}

// LeaseOptions say how a lease is taken.
type LeaseOptions struct {
	// Key names the lease within the task ("" for the task's own; a shard
	// subtask's worker uses its shard's name).
	Key    string
	Holder Holder
	// TTL is how long a holder that stopped renewing keeps the lease
	// (renew at least three times within it).
	TTL time.Duration
	// Dead reports whether the holder with the same Name as ours is gone
	// (its process no longer runs): its lease is then taken at once.
	Dead func(Holder) bool
	// Waiting, when set, is called once if the lease must wait for its
	// holder to miss renewals for TTL, so that the run can say why it
	// does not start at once.
	Waiting func(Holder)
}

// AcquireLease takes the task's lease. A lease held by a run that keeps
// renewing it fails with ErrTaskRunning; one whose holder stopped renewing
// (a killed run) is taken once TTL passed without a renewal, or at once
// when the holder has our name and o.Dead says it is gone.
func (s *Store) AcquireLease(ctx context.Context, o LeaseOptions) (*Lease, error) {
	id := s.task
	if o.Key != "" {
		id += "/" + o.Key
	}
	coll := s.db.Collection(LeasesCollection)
	l := &Lease{s: s, id: id, token: newToken()}
	doc := leaseDoc{ID: id, Task: s.task, Holder: o.Holder, Token: l.token, At: time.Now().UTC()}
	var seen *leaseDoc
	var seenAt time.Time
	waited := false
	for {
		var cur leaseDoc
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&cur)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			if _, err := coll.InsertOne(ctx, doc); err == nil {
				return l, nil
			} else if !mongo.IsDuplicateKeyError(err) {
				return nil, fmt.Errorf("checkpoint: take the lease of %s: %w", id, err)
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("checkpoint: read the lease of %s: %w", id, err)
		}
		same := cur.Holder == o.Holder || (cur.Holder.Name == o.Holder.Name && o.Dead != nil && o.Dead(cur.Holder))
		if seen != nil && cur.Beat != seen.Beat {
			return nil, fmt.Errorf("%w: task %s is run by process %d on %s, which renews its lease; stop it first (one run per task: ferry run and ferry cutover resume from the same checkpoint)",
				ErrTaskRunning, id, cur.Holder.PID, cur.Holder.Name)
		}
		if seen == nil {
			seen, seenAt = &cur, time.Now()
			if !same && o.Waiting != nil && !waited {
				o.Waiting(cur.Holder)
				waited = true
			}
		}
		if same || time.Since(seenAt) >= o.TTL {
			r, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "token", Value: cur.Token}}, doc)
			if err != nil {
				return nil, fmt.Errorf("checkpoint: take the lease of %s: %w", id, err)
			}
			if r.MatchedCount == 1 {
				return l, nil
			}
			seen = nil
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(time.Second, o.TTL/4)):
		}
	}
}

// Renew tells waiting runs the holder lives; it fails with ErrTaskRunning
// when another run took the lease.
func (l *Lease) Renew(ctx context.Context) error {
	r, err := l.s.db.Collection(LeasesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: l.id}, {Key: "token", Value: l.token}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "beat", Value: int64(1)}}}, {Key: "$set", Value: bson.D{{Key: "at", Value: time.Now().UTC()}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: renew the lease of %s: %w", l.id, err)
	}
	if r.MatchedCount == 0 {
		return fmt.Errorf("%w: another run took the lease of task %s", ErrTaskRunning, l.id)
	}
	return nil
}

// Release gives the lease up.
func (l *Lease) Release(ctx context.Context) error {
	if _, err := l.s.db.Collection(LeasesCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: l.id}, {Key: "token", Value: l.token}}); err != nil {
		return fmt.Errorf("checkpoint: release the lease of %s: %w", l.id, err)
	}
	return nil
}

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LiveHolder returns the holder of a lease of the task (its own or a
// shard subtask's) renewed within the last `within`, or nil when no run
// holds one.
func (s *Store) LiveHolder(ctx context.Context, within time.Duration) (*Holder, error) {
	var doc leaseDoc
	err := s.db.Collection(LeasesCollection).FindOne(ctx,
		bson.D{{Key: "task", Value: s.task}, {Key: "at", Value: bson.D{{Key: "$gt", Value: time.Now().UTC().Add(-within)}}}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read the leases of %s: %w", s.task, err)
	}
	return &doc.Holder, nil
}
