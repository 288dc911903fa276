package engine

import (
	"context"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// checkSelection applies the task's namespace rules to the source's
// collections before anything is written: it warns about include patterns
// that select nothing, and fails when two selected collections would be
// written to one target collection, or when nothing is selected (in mode
// full, or because namespaces.exclude removed what include selected; a
// replaying task whose include matches nothing yet may wait for the
// collections to be created).
func (e *Engine) checkSelection(ctx context.Context) error {
	names, err := catalog.Names(ctx, e.source, e.mapper)
	if err != nil {
		return err
	}
	sel := e.mapper.Select(names)
	for _, why := range sel.Warnings {
		e.baseLog().WarnContext(ctx, why)
	}
	if err := sel.Err(); err != nil && (e.task.Mode == config.ModeFull || sel.Excluded) {
		return err
	}
	return e.mapper.Collisions(sel.Selected)
}
