// Package reset is `ferry reset`: drop a task's checkpoint from the
// target, so that the next run of the task starts over.
package reset

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// liveWithin is how recently a run must have renewed the task's lease for
// reset to refuse (a few of the engine's lease renewals).
const liveWithin = 30 * time.Second

type flags struct {
	file string
	yes  bool
}

// NewCommand returns `ferry reset`.
func NewCommand() *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "reset -f task.yaml",
		Short: "Drop a task's checkpoint from the target so that its next run starts over",
		Long: `reset deletes what the task keeps in the target's checkpoint database
(checkpoint.database, mongoferry by default): its record, copy plans and
ranges, shard positions, held options and leases. The next 'ferry run' of
the task then starts over: it records a new replay start position and
copies every selected collection again.

Use it after changing a task's namespaces (a run refuses a changed
selection, since the checkpoint only covers the old one), or to copy
everything again. The target's collections are left as they are: set
fullSync.dropTarget: true (or fullSync.onConflict: overwrite) for the new
copy. Other tasks' checkpoints are not touched.

It asks for confirmation unless --yes is given, and refuses while a run of
the task holds its lease (stop that run first).`,
		Example: `  ferry reset -f task.yaml
  ferry reset -f task.yaml --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReset(cmd, f)
		},
	}
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "task file (YAML)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "drop the checkpoint without asking")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func runReset(cmd *cobra.Command, f flags) error {
	ctx := cmd.Context()
	task, err := config.Load(f.file)
	if err != nil {
		return err
	}
	target, err := conn.Open(ctx, "target", task.Target, conn.Options{AppName: "mongoferry-reset"})
	if err != nil {
		return err
	}
	defer func() { _ = target.Disconnect(context.WithoutCancel(ctx)) }()
	return Reset(ctx, target, task, f.yes, cmd.InOrStdin(), cmd.OutOrStdout())
}

// Reset drops task's checkpoint on target, after asking on in (unless
// yes); it says what it did on out.
func Reset(ctx context.Context, target *mongo.Client, task *config.Task, yes bool, in io.Reader, out io.Writer) error {
	db := task.Checkpoint.Database
	store := checkpoint.NewStore(target, db, task.Name)
	rec, err := store.Task(ctx)
	if errors.Is(err, mongo.ErrNoDocuments) {
		fmt.Fprintf(out, "task %s has no checkpoint in database %s on the target: nothing to reset\n", task.Name, db)
		return nil
	}
	if err != nil {
		return err
	}
	h, err := store.LiveHolder(ctx, liveWithin)
	if err != nil {
		return err
	}
	if h != nil {
		return fmt.Errorf("task %s is running (%s, pid %d holds its lease): stop that run, then reset", task.Name, h.Name, h.PID)
	}
	fmt.Fprintf(out, "task %s: checkpoint in database %s on the target, phase %s, copy done: %t, started %s, %d runs\n",
		task.Name, db, rec.Phase, rec.CopyDone, rec.StartedAt.Format(time.RFC3339), rec.Runs)
	if !yes && !confirm(in, out) {
		return errors.New("reset: not confirmed; nothing was dropped (pass --yes to drop without asking)")
	}
	if err := store.Drop(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "dropped the checkpoint of task %s: its next run starts over and copies everything again "+
		"(the target's collections were left as they are: set fullSync.dropTarget: true or fullSync.onConflict: overwrite)\n", task.Name)
	return nil
}

// confirm asks whether to drop the checkpoint and reads the answer.
func confirm(in io.Reader, out io.Writer) bool {
	fmt.Fprint(out, "drop it, so that the next run starts over? [y/N] ")
	line, _ := bufio.NewReader(in).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}
