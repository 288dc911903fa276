package board

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Position is what one subtask publishes about its shard's oplog.
type Position struct {
	// Shard is the shard's name: its _id in config.shards, the name a
	// transaction coordinator gives it among the participants (Decision).
	Shard string `bson:"shard" json:"shard"`
	// Read is the ts of the last entry read from the shard's oplog,
	// no-ops included.
	Read bson.Timestamp `bson:"read" json:"read"`
	// Applied is the subtask's durable position: every entry of the
	// shard's oplog at or below it is applied on the target and saved in
	// the subtask's checkpoint, so a restart never goes back below it.
	Applied bson.Timestamp `bson:"applied" json:"applied"`
	// Retired is set once a removed shard's oplog is read to its end and
	// applied: the subtask holds nobody back any more.
	Retired bool `bson:"retired" json:"retired"`
	// Drained is set once the subtask stopped at its shard's cut-over
	// drain position: the source takes no user writes after it (they are
	// blocked, or the application stopped them), so what the shard logs
	// later is no user's write and the subtask holds nobody back.
	Drained bool `bson:"drained,omitempty" json:"drained,omitempty"`
	// Waiting is the commit ts of a multi-shard transaction whose part
	// on this shard inserts documents and waits for the other subtasks
	// (a shard-key change moves a document with such an insert), set only
	// once everything before that part is applied and saved. Another
	// subtask waiting on the same commit counts it as far enough, so the
	// parts of one transaction never wait for each other.
	Waiting bson.Timestamp `bson:"waiting,omitempty" json:"waiting,omitzero"`
	// Prepared are the prepared transactions (oplog.TxnID) the subtask
	// has read and not applied. Needs, when set, is what its reader waits
	// for: every other subtask at or past Prev(Needs) (a held write's
	// need, a commit timestamp), or, while its part of a transaction
	// waits for another's (see replay.Replayer.waitCommit), the ts of its
	// own commit entry.
	Prepared []string       `bson:"prepared,omitempty" json:"prepared,omitempty"`
	Needs    bson.Timestamp `bson:"needs,omitempty" json:"needs,omitzero"`
	// Decided are the commit decisions of multi-shard transactions this
	// shard coordinates that the subtask has read (the shard's
	// config.transaction_coordinators writes) and not yet seen every
	// participant pass: a participant's commit waits only for the shards
	// a decision names (see replay.Replayer.waitCommit).
	Decided []Decision `bson:"decided,omitempty" json:"decided,omitempty"`
	// OpenFrom is the first entry of the oldest transaction the subtask
	// has read and not yet applied (buffered, prepared, or being
	// applied); zero when there is none. Its durable position may pass
	// such a transaction's entries (saved as state) before its writes are
	// on the target: a write that waits for another shard's writes below
	// its own ts to be applied (replay's conflict wait) looks at it.
	OpenFrom bson.Timestamp `bson:"openFrom,omitempty" json:"openFrom,omitzero"`
}

// Settled reports whether every write of p's shard before ts is applied
// on the target as far as a subtask at ts waiting on it can tell: p
// reaches ts, and no transaction of p's shard that began before ts is
// still unapplied, unless p waits for something past ts (Needs after ts;
// at ts itself, the shard whose name sorts first goes on, self being
// the waiting one), where it applies nothing before the waiter goes on.
func (p Position) Settled(self string, ts bson.Timestamp) bool {
	if p.Retired || p.Drained {
		return true
	}
	if !p.Reaches(ts, bson.Timestamp{}) {
		return false
	}
	if p.OpenFrom.IsZero() || !p.OpenFrom.Before(ts) {
		return true
	}
	return p.Needs.After(ts) || p.Needs.Equal(ts) && p.Shard > self
}

// Decision is a coordinator's commit decision: transaction Txn
// (oplog.TxnID) commits at Commit (its commitTimestamp) on the shards
// named in Participants (their _id in config.shards).
type Decision struct {
	Txn          string         `bson:"txn" json:"txn"`
	Commit       bson.Timestamp `bson:"commit" json:"commit"`
	Participants []string       `bson:"participants" json:"participants"`
}

// Reaches reports whether p lets a subtask go on past a point that needs
// every entry of p's shard before ts applied: p's shard is retired or
// drained for a cut-over, or its durable position is at or past Prev(ts). A subtask waiting on the
// commit ts waitingOn (when not zero) reaches it too.
func (p Position) Reaches(ts, waitingOn bson.Timestamp) bool {
	switch {
	case p.Retired || p.Drained || p.Applied.Compare(Prev(ts)) >= 0:
		return true
	case !waitingOn.IsZero() && p.Waiting.Equal(waitingOn):
		return true
	}
	return false
}

// Prev returns the position just below ts: a subtask at Prev(ts) has
// applied everything of its shard's oplog before ts.
func Prev(ts bson.Timestamp) bson.Timestamp {
	switch {
	case ts.I > 0:
		return bson.Timestamp{T: ts.T, I: ts.I - 1}
	case ts.T == 0:
		return ts
	}
	return bson.Timestamp{T: ts.T - 1, I: ^uint32(0)}
}

// Board is where the subtasks of one task publish their positions and read
// each other's.
type Board interface {
	// Publish records p as its shard's latest position.
	Publish(ctx context.Context, p Position) error
	// Positions returns the latest position of every subtask that has
	// published, in no particular order.
	Positions(ctx context.Context) ([]Position, error)
}
