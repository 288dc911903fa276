package source

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// ErrRolledBack means the source's oplog no longer holds the entry a
// task's checkpoint was saved at, with its ts and term: the source's
// history changed under the checkpoint (a failover rolled back entries
// replay had applied). It also matches ErrOplogWindowLost: the fix is the
// same, a new copy.
var ErrRolledBack = errors.New("SourceRolledBack: the source's oplog no longer holds the entry the checkpoint was saved at")

// CheckRollback fails with ErrRolledBack when the source's oplog does not
// hold the entry at (its ts, with its term): entries replay applied were
// rolled back on the source, and resuming would keep them on the target.
// An entry older than the oplog's oldest is left to CheckWindow.
//
// With the majority cap (commitcap.go) replay only reads committed
// entries, which no failover removes: this is the guard that says so.
func CheckRollback(ctx context.Context, client *mongo.Client, at checkpoint.OpTime) error {
	raw, err := client.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{{Key: "ts", Value: at.TS}},
		options.FindOne().SetProjection(bson.D{{Key: "ts", Value: 1}, {Key: "t", Value: 1}})).Raw()
	found := err == nil
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("read the oplog entry the checkpoint was saved at (%s): %w", formatTS(at.TS), err)
	}
	if found && termOf(raw) == at.T {
		return nil
	}
	if !found {
		oldest, err := OldestTS(ctx, client)
		if err != nil {
			return err
		}
		if !oldest.IsZero() && oldest.Compare(at.TS) > 0 {
			return nil // trimmed, not rolled back: CheckWindow's case
		}
	}
	now := "holds no entry at that ts"
	if found {
		now = fmt.Sprintf("holds an entry of term %d there", termOf(raw))
	}
	return fmt.Errorf("%w (%w): the task's checkpoint was saved at the oplog entry %s of term %d, and the source's oplog now %s: "+
		"the source rolled back writes (a failover) that the target may already hold, so resuming would keep them; nothing was written. "+
		"Start over: ferry reset -f <task file> drops the checkpoint (a SyncTask: delete it with deletePolicy: Delete and create it again), "+
		"then run the task again to copy everything",
		ErrRolledBack, ErrOplogWindowLost, formatTS(at.TS), at.T, now)
}

// entryLog is the positions of the entries a tailer handed out that no
// checkpoint has passed yet (EntryAt).
type entryLog struct {
	mu   sync.Mutex
	ents []checkpoint.OpTime
}

// maxEntryLog bounds the log: the oldest positions go first (EntryAt
// then answers with none, and the checkpoint keeps the entry it had).
const maxEntryLog = 1 << 18

func (l *entryLog) add(raw bson.Raw) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ents) >= maxEntryLog {
		l.ents = append(l.ents[:0], l.ents[len(l.ents)/2:]...)
	}
	l.ents = append(l.ents, checkpoint.OpTime{TS: tsOf(raw), T: termOf(raw)})
}

// EntryAt implements checkpoint.EntryLog: the newest entry the tailer
// handed out at or below ts. Positions below it are forgotten (a
// checkpoint never moves back).
func (t *Tailer) EntryAt(ts bson.Timestamp) (checkpoint.OpTime, bool) {
	l := &t.handed
	l.mu.Lock()
	defer l.mu.Unlock()
	best := -1
	for i, e := range l.ents {
		if e.TS.Compare(ts) <= 0 && (best < 0 || e.TS.Compare(l.ents[best].TS) > 0) {
			best = i
		}
	}
	if best < 0 {
		return checkpoint.OpTime{}, false
	}
	at := l.ents[best]
	keep := l.ents[:0]
	for _, e := range l.ents {
		if e.TS.Compare(at.TS) >= 0 {
			keep = append(keep, e)
		}
	}
	l.ents = keep
	return at, true
}
