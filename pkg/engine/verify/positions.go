package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// SourceNow returns the source's current position: its time as
// source.ServerTime reads it (one hello). A position from the server's
// clock (FerretDB: the start of the current second) is moved to the next
// second, so that it lies above the writes of this second too.
func SourceNow(ctx context.Context, client *mongo.Client) (Position, error) {
	at := time.Now()
	ts, err := source.ServerTime(ctx, client)
	if err != nil {
		return Position{}, fmt.Errorf("streaming verify: %w", err)
	}
	if ts.I == 0 {
		ts.T++
	}
	return Position{TS: ts, At: at}, nil
}

// CheckpointPositions answers the streaming verifier for a pair that a
// separate process keeps in sync (`ferry verify --streaming`): the
// source's clock, and the task's saved replay checkpoint on the target.
// The checkpoint is saved every few seconds, so rechecks wait that much
// longer than in the worker itself. Both are read at most once per
// Refresh.
type CheckpointPositions struct {
	Source *mongo.Client
	Store  *checkpoint.Store
	// Refresh is how long an answer is reused (1s when zero).
	Refresh time.Duration

	mu     sync.Mutex
	readAt time.Time
	passed Position // every write up to it is applied
}

// Now implements Positions.
func (p *CheckpointPositions) Now(ctx context.Context) (Position, error) {
	return SourceNow(ctx, p.Source)
}

// Passed implements Positions: the checkpoint is at or past pos, or it is
// at or past the source's newest oplog entry read after pos was taken
// (the source wrote nothing since).
func (p *CheckpointPositions) Passed(ctx context.Context, pos Position) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	refresh := p.Refresh
	if refresh <= 0 {
		refresh = time.Second
	}
	if time.Since(p.readAt) >= refresh {
		readAt := time.Now()
		rec, err := p.Store.Task(ctx)
		if err != nil {
			if errors.Is(err, checkpoint.ErrNotFound) {
				return false, fmt.Errorf("no replay checkpoint for this task on the target: is the task running? %w", err)
			}
			return false, err
		}
		newest, err := source.NewestTS(ctx, p.Source)
		if err != nil {
			return false, fmt.Errorf("read the source's newest oplog entry: %w", err)
		}
		p.passed = Position{TS: rec.AppliedTS}
		if !newest.IsZero() && rec.AppliedTS.Compare(newest) >= 0 {
			// Caught up as of readAt: everything written before it is applied.
			p.passed.At = readAt
		}
		p.readAt = readAt
	}
	return p.passed.TS.Compare(pos.TS) >= 0 || !p.passed.At.Before(pos.At) && !p.passed.At.IsZero(), nil
}
