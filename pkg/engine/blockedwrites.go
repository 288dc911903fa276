package engine

import (
	"errors"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// ErrTargetWritesBlocked is returned when the target refuses writes
// because its user writes are blocked (setUserWriteBlockMode), as a
// cut-over with blockSourceWrites leaves the old source that a reverse
// sync then writes to.
var ErrTargetWritesBlocked = errors.New("the target's user writes are blocked")

// explainBlockedWrites says what to do about a write the target refused
// because its user writes are blocked: nothing it refused was written.
func explainBlockedWrites(err error) error {
	if err == nil || !sink.HasCode(err, sink.CodeUserWritesBlocked) {
		return err
	}
	return fmt.Errorf("%w (setUserWriteBlockMode; a cut-over with blockSourceWrites leaves the old source so, and a reverse sync writes to it): "+
		"the refused writes were not applied and the task stopped; give the target's user a role with the bypassWriteBlockingMode privilege "+
		"(its writes then go through while the application's stay blocked), or unblock the target's writes with "+
		"db.adminCommand({setUserWriteBlockMode: 1, global: false}), then run the task again: %w", ErrTargetWritesBlocked, err)
}
