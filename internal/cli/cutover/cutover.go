// Package cutover is `ferry cutover`: run a task from its checkpoint with
// its cut-over requested (catch up, optionally block the source's writes,
// drain, verify, finalize), show its progress and print its summary.
package cutover

import (
	"fmt"

	"github.com/spf13/cobra"

	cliflags "github.com/mongoferry/mongoferry/internal/cli/flags"
	"github.com/mongoferry/mongoferry/internal/cli/run"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// flags are the cut-over's own flags; the rest are ferry run's.
type flags struct {
	blockSourceWrites bool
	verify            string
	maxLag            cliflags.MaxLag
}

// NewCommand returns `ferry cutover`.
func NewCommand() *cobra.Command {
	var (
		rf run.Flags
		f  flags
	)
	cmd := &cobra.Command{
		Use:   "cutover -f task.yaml",
		Short: "End a sync: catch up, drain to the source's newest position, verify and finalize the target",
		Long: `cutover runs the task from its checkpoint with cutover.requested set, and
ends when the target holds everything the source wrote up to the cut-over:

  CatchingUp      replay runs until the lag is at most --max-lag
  BlockingWrites  with --block-source-writes, user writes on the source are
                  blocked (setUserWriteBlockMode, MongoDB 6.0 or later)
  Draining        the source's newest oplog position is read; replay stops
                  once everything up to it is applied
  Verifying       the target is compared with the source (--verify)
  Finalizing      what the sync held back on the target is restored
  Complete        the positions are recorded; a reverse sync starts at the
                  target's

Without --block-source-writes, stop the application's writes to the source
before the cut-over: writes made after the drain position are not copied.
With it, source writes stay blocked after the cut-over, so that the
application cannot write to the old deployment by mistake; unblock them with
db.adminCommand({setUserWriteBlockMode: 1, global: false}).

Each step is recorded in the target's checkpoint database: run the same
command again after a crash or Ctrl-C and it goes on from the step it
reached. Stop 'ferry run' of the task first: one run of a task at a time
(the second stops with an error). The same happens in 'ferry run' when the
task file sets cutover.requested: true.`,
		Example: `  # the application stopped writing: drain, verify with hashes, finish
  ferry cutover -f task.yaml

  # block writes on the source (MongoDB 6.0+), wait for a lag under 2s
  ferry cutover -f task.yaml --block-source-writes --max-lag 2s

  # count documents only
  ferry cutover -f task.yaml --verify count`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rf.Edit = func(t *config.Task) error { return f.apply(cmd, t) }
			return run.Run(cmd.Context(), rf)
		},
	}
	run.AddFlags(cmd, &rf)
	cmd.Flags().BoolVar(&f.blockSourceWrites, "block-source-writes", false, "block user writes on the source before the drain (setUserWriteBlockMode; MongoDB 6.0 or later); default: cutover.blockSourceWrites of the task file")
	cmd.Flags().StringVar(&f.verify, "verify", "", "comparison after the drain: none, count, hash or sample; default: cutover.verify of the task file (hash)")
	cmd.Flags().Var(&f.maxLag, "max-lag", "lag under which the cut-over proceeds: a duration of whole seconds from 1s to 1h (or a number of seconds); default: cutover.maxLagSeconds of the task file (5s)")
	cmd.MarkFlagsOneRequired("file", "task-env")
	cmd.MarkFlagsMutuallyExclusive("file", "task-env")
	return cmd
}

// apply requests the cut-over in t, with the flags the user set.
func (f flags) apply(cmd *cobra.Command, t *config.Task) error {
	t.Cutover.Requested = true
	if cmd.Flags().Changed("block-source-writes") {
		t.Cutover.BlockSourceWrites = f.blockSourceWrites
	}
	if cmd.Flags().Changed("verify") {
		t.Cutover.Verify = config.VerifyMode(f.verify)
	}
	if cmd.Flags().Changed("max-lag") {
		t.Cutover.MaxLagSeconds = f.maxLag.Seconds
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("cutover: %w", err)
	}
	return nil
}
