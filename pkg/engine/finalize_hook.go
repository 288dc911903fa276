package engine

import (
	"context"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// FinalizeInput is what finalizing the target at cut-over works with.
type FinalizeInput struct {
	Task   string
	Target *mongo.Client
	// Store is the task's checkpoint store, where what the sync held back
	// on the target may be recorded.
	Store  *checkpoint.Store
	Mapper *catalog.Mapper
	Log    *slog.Logger
}

func (e *Engine) finalizeInput() FinalizeInput {
	return FinalizeInput{Task: e.task.Name, Target: e.target, Store: e.store, Mapper: e.mapper, Log: e.log}
}

// finalizeTarget restores on the target, at cut-over, what the sync held
// back so that the target's data would not change under replay (TTL
// indexes, unique indexes built late, capped size limits). It runs once
// the target is drained and verified, and again after a restart in the
// Finalizing step, so it must be idempotent. Package finalize implements
// it; until then nothing is held back and there is nothing to restore.
func (e *Engine) finalizeTarget(ctx context.Context, in FinalizeInput) error {
	_, _ = ctx, in
	return nil
}
