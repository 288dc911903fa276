package source

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// ErrNoCommitPoint means a replica set member reported no majority
// commit point: its oplog entries cannot be told apart from those a
// failover may roll back, so none is released.
var ErrNoCommitPoint = errors.New("the source reports no majority commit point")

// CommitPoint is a node's majority commit point: every entry of its oplog
// at or below TS is on a majority of the replica set and survives any
// failover. Capped is false where nothing can roll back (a server without
// replication: a standalone mongod, FerretDB), TS is then unset.
type CommitPoint struct {
	TS     bson.Timestamp
	Term   int64
	Capped bool
}

// Allows reports whether an entry at ts may be released.
func (c CommitPoint) Allows(ts bson.Timestamp) bool { return !c.Capped || ts.Compare(c.TS) <= 0 }

// CommitReader reads a node's majority commit point.
type CommitReader func(ctx context.Context) (CommitPoint, error)

// MajorityCommit returns a CommitReader of the source's primary. It reads hello's lastWrite.majorityOpTime, which every
// replica set member (primary or secondary) reports from MongoDB 3.4 to
// 8.0, whether or not majority read concern is enabled; a member that
// leaves it out is asked replSetGetStatus's optimes.lastCommittedOpTime.
// A server without replication (no setName in hello: a standalone
// mongod, FerretDB) writes nothing a failover could undo: every entry
// it has written is as committed as it will ever be, and the point is
// uncapped.
func MajorityCommit(client *mongo.Client) CommitReader {
	return func(ctx context.Context) (CommitPoint, error) {
		hello, err := primaryAdmin(client).RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
		if err != nil {
			return CommitPoint{}, fmt.Errorf("read the majority commit point (hello): %w", err)
		}
		if c, ok := opTimeIn(hello, "lastWrite", "majorityOpTime"); ok {
			return c, nil
		}
		if _, ok := hello.Lookup("setName").StringValueOK(); !ok {
			return CommitPoint{}, nil
		}
		st, err := primaryAdmin(client).RunCommand(ctx, bson.D{{Key: "replSetGetStatus", Value: 1}}).Raw()
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 59 {
			// CommandNotFound: a server that names a set in hello but
			// has no replication to report (FerretDB run with a
			// replica set name) keeps no other copy to roll back to.
			return CommitPoint{}, nil
		}
		if err != nil {
			return CommitPoint{}, fmt.Errorf("%w: hello has no lastWrite.majorityOpTime and replSetGetStatus failed: %w", ErrNoCommitPoint, err)
		}
		if c, ok := opTimeIn(st, "optimes", "lastCommittedOpTime"); ok {
			return c, nil
		}
		return CommitPoint{}, fmt.Errorf("%w: neither hello's lastWrite.majorityOpTime nor replSetGetStatus's optimes.lastCommittedOpTime is set", ErrNoCommitPoint)
	}
}

// primaryAdmin is the admin database read on the primary whatever the
// client's read preference: the commit point and the entries confirming
// a branch come from the primary (commitcap.go), even when the oplog is
// read from a secondary.
func primaryAdmin(client *mongo.Client) *mongo.Database {
	return client.Database("admin", options.Database().SetReadPreference(readpref.Primary()))
}

// opTimeIn reads the optime {ts, t} at path in doc.
func opTimeIn(doc bson.Raw, path ...string) (CommitPoint, bool) {
	v, err := doc.LookupErr(path...)
	if err != nil {
		return CommitPoint{}, false
	}
	ot, ok := v.DocumentOK()
	if !ok {
		return CommitPoint{}, false
	}
	t, i, ok := ot.Lookup("ts").TimestampOK()
	if !ok {
		return CommitPoint{}, false
	}
	term, ok := ot.Lookup("t").AsInt64OK()
	if !ok {
		term = -1 // as termOf reads an entry without one
	}
	return CommitPoint{TS: bson.Timestamp{T: t, I: i}, Term: term, Capped: true}, true
}

// CommittedTS is the newest position of a source's oplog that a failover
// cannot roll back: the newest entry, or the majority commit point when
// that is older. Replay starts there when it is recorded before a copy
// (which reads at majority read concern), so no write between the two is
// missed by both.
func CommittedTS(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	newest, err := NewestTS(ctx, client)
	if err != nil {
		return newest, err
	}
	c, err := MajorityCommit(client)(ctx)
	if err != nil {
		return bson.Timestamp{}, err
	}
	if c.Capped && c.TS.Compare(newest) < 0 {
		return c.TS, nil
	}
	return newest, nil
}
