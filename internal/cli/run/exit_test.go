package run

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestExitCode: the exit status of each way a run ends, as the README's
// exit-code list and the operator's mapping (4 is CutoverFailed) read it.
// A cut-over that fails at its verification exits 4 like any failed step.
func TestExitCode(t *testing.T) {
	cutoverStep := func(step string, err error) error {
		return fmt.Errorf("%w, step %s: %w", engine.ErrCutoverFailed, step, err)
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"failed", context.Background(), errors.New("connection refused"), workerapi.ExitFailed},
		{"verification of a full copy", context.Background(), fmt.Errorf("%w: see the verification report", engine.ErrVerificationFailed), workerapi.ExitVerificationFailed},
		{"oplog window lost", context.Background(), fmt.Errorf("replay: %w", source.ErrOplogWindowLost), workerapi.ExitOplogWindowLost},
		{"cut-over fails at verification", context.Background(), cutoverStep("Verifying", fmt.Errorf("%w: [shop.orders] differ", engine.ErrVerificationFailed)), workerapi.ExitCutoverFailed},
		{"cut-over fails at blocking writes", context.Background(), cutoverStep("BlockingWrites", errors.New("not supported")), workerapi.ExitCutoverFailed},
		{"cut-over not supported", context.Background(), fmt.Errorf("%w: a change stream", engine.ErrCutoverNotSupported), workerapi.ExitCutoverFailed},
		{"interrupted", stopped, context.Canceled, workerapi.ExitInterrupted},
	} {
		if got := exitCode(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}
