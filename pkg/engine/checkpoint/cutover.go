package checkpoint

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// CutoverRecord is how far a task's cut-over got, kept in its task record
// so that a restarted worker goes on from the step it reached.
type CutoverRecord struct {
	// Step is one of workerapi's Cutover* step names.
	Step          string `bson:"step"`
	CaughtUp      bool   `bson:"caughtUp,omitempty"`
	WritesBlocked bool   `bson:"writesBlocked,omitempty"`
	// SourceTS is the source's newest position read once writes stopped:
	// the drain replays up to and including it.
	SourceTS bson.Timestamp `bson:"sourceTS,omitempty"`
	// TargetTS is the target's newest oplog position at the end: where a
	// reverse sync starts.
	TargetTS bson.Timestamp `bson:"targetTS,omitempty"`
	// Verify is the verification's outcome once it ran.
	Verify     *CutoverVerify `bson:"verify,omitempty"`
	StartedAt  time.Time      `bson:"startedAt"`
	FinishedAt time.Time      `bson:"finishedAt,omitempty"`
	Message    string         `bson:"message,omitempty"`
}

// CutoverVerify is the outcome of the verification run at cut-over.
type CutoverVerify struct {
	Mode string `bson:"mode"`
	OK   bool   `bson:"ok"`
	// Differing names the source namespaces whose target differs.
	Differing []string `bson:"differing,omitempty"`
}

// SetCutover records the cut-over's progress in the task record.
func (s *Store) SetCutover(ctx context.Context, c CutoverRecord) error {
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cutover", Value: c}, {Key: "updatedAt", Value: time.Now().UTC()}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: record cut-over step %s: %w", c.Step, err)
	}
	return nil
}
