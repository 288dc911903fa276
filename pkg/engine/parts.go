package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// Copier is the full copy as the engine drives it in its FullSync phase
// (fullsync.Copier). Its checkpoint is the ranges it marks done in the
// task's checkpoint store, from which a later Run resumes.
type Copier interface {
	// Preflight checks, before anything is written, that the copy can
	// start (a target that is not empty stops it here).
	Preflight(ctx context.Context) error
	// Run copies every namespace, skipping the ranges the checkpoint store
	// marks done; it returns when the copy is done or fails, or when ctx
	// ends (how the engine stops it).
	Run(ctx context.Context) error
	// Status is a value snapshot of the copy.
	Status() fullsync.Status
}

// Replayer is oplog replay as the engine drives it in its Streaming phase
// (replay.Replayer): started from the task's resume position, it saves its
// Checkpoint in the checkpoint store as it applies entries.
type Replayer interface {
	// Run applies entries until ctx ends (how the engine stops it, also
	// once replay caught up) or a fatal error.
	Run(ctx context.Context) error
	// Status is a value snapshot of replay.
	Status() replay.Status
	// Checkpoint is the position at and below which every entry is
	// applied.
	Checkpoint() bson.Timestamp
}

// The engine's parts.
var (
	_ Copier   = (*fullsync.Copier)(nil)
	_ Replayer = (*replay.Replayer)(nil)
)

// newReplayer makes the replayer of a replica-set source's Streaming
// phase.
func newReplayer(o replay.Options) Replayer { return replay.New(o) }
