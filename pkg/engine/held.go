package engine

import (
	"context"

	"github.com/mongoferry/mongoferry/pkg/engine/finalize"
)

// restoreHeld puts back on the target what the sync held back (TTL
// expiries, capped limits, late unique indexes: package finalize) once a
// replaying run ends caught up. A worker that runs one shard's subtask
// leaves it to the cut-over, which runs once every shard caught up. What
// the target cannot take back is logged with its manual fix and stays
// listed by finalize.Pending.
func (e *Engine) restoreHeld(ctx context.Context) error {
	if e.streaming.partial() {
		return nil
	}
	return e.finalizeTarget(ctx)
}

// finalizeTarget restores on the target what the sync held back so that
// the target's data would not change under replay (package finalize). The
// cut-over runs it once the target is drained and verified, and again
// after a restart in the Finalizing step: finalize.Restore is idempotent.
func (e *Engine) finalizeTarget(ctx context.Context) error {
	rep, err := finalize.Restore(ctx, e.target, e.task.Checkpoint.Database, e.task.Name)
	if err != nil {
		return err
	}
	for _, h := range rep.Restored {
		e.log.InfoContext(ctx, "restored what the sync held back", "ns", h.NS, "held", h.String())
	}
	for _, h := range rep.Gone {
		e.log.InfoContext(ctx, "held-back option of a collection or index the target no longer has", "ns", h.NS, "held", h.String())
	}
	for _, m := range rep.Manual {
		e.log.WarnContext(ctx, "the target cannot take back what the sync held back; restore it by hand", "ns", m.Held.NS, "held", m.Held.String(), "fix", m.Note)
	}
	return nil
}
