// Package reverse is `ferry reverse`: write the reverse sync of a task
// whose cut-over completed (from its target back to its source, replaying
// from a recorded position without a copy), and optionally run it.
package reverse

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/mongoferry/mongoferry/internal/cli/run"
	"github.com/mongoferry/mongoferry/pkg/config"
)

type reverseFlags struct {
	file   string
	from   string
	output string
	run    bool
	listen string
}

// NewCommand returns `ferry reverse`.
func NewCommand() *cobra.Command {
	var f reverseFlags
	cmd := &cobra.Command{
		Use:   "reverse -f task.yaml --from SECONDS,INCREMENT [-o reverse.yaml] [--run]",
		Short: "Write (and run) the reverse sync of a task after its cut-over",
		Long: `reverse turns a task around after its cut-over, so that the old source stays
a way back while the application writes to the new deployment.

The reverse task copies nothing: it is in mode incremental, reads the old
target's oplog from --from (the target's position recorded at cut-over, as
status.cutover.targetPosition shows it, or an RFC 3339 time) and replays every
later change onto the old source. Source and target are swapped with their
credentials and TLS settings, renames are inverted, and it is named
<task>-reverse with a checkpoint database of its own (<database>_reverse),
so it never resumes from, or writes into, the forward task's checkpoint. The
forward task's checkpoint database is excluded from the replay.

The task file is written to -o; --run then runs it as 'ferry run -f' would,
until interrupted. Without -o it is printed to standard output for review,
with any password in a URI replaced by *** (give credentials with username
and passwordFile or passwordEnv, or write the file with -o). A position no longer in the
target's oplog stops it with OplogWindowLost (exit 3) before anything is
written.`,
		Example: `  # the reverse task, to review
  ferry reverse -f task.yaml --from 1764045600,3 -o reverse.yaml

  # write it and run it
  ferry reverse -f task.yaml --from 1764045600,3 -o reverse.yaml --run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return reverse(cmd, f)
		},
	}
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "the forward task file (YAML)")
	cmd.Flags().StringVar(&f.from, "from", "", "where the reverse sync starts: the target's oplog position at cut-over (seconds,increment) or an RFC 3339 time")
	cmd.Flags().StringVarP(&f.output, "output", "o", "", "write the reverse task file here (default: standard output)")
	cmd.Flags().BoolVar(&f.run, "run", false, "run the reverse task once written (needs -o)")
	cmd.Flags().StringVar(&f.listen, "listen", run.DefaultListen, "with --run: address for /metrics, /status and /healthz; empty to disable (as ferry run's --listen)")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

func reverse(cmd *cobra.Command, f reverseFlags) error {
	if f.run && f.output == "" {
		return errors.New("--run: give the file to write the reverse task to with -o, so that a restart runs the same task (ferry run -f FILE)")
	}
	task, err := config.Load(f.file)
	if err != nil {
		return err
	}
	rev, err := task.Reverse(f.from)
	if err != nil {
		return fmt.Errorf("--from %s: %w", f.from, err)
	}
	header := fmt.Sprintf("# The reverse sync of %s (ferry reverse --from %s): from its target back to its source.\n", task.Name, f.from)
	if f.output == "" {
		data, err := render(header, redacted(rev))
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	data, err := render(header, rev)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.output, data, 0o600); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote task %s to %s: run it with ferry run -f %s\n", rev.Name, f.output, f.output)
	if !f.run {
		return nil
	}
	r := run.NewCommand()
	args := []string{"-f", f.output}
	if cmd.Flags().Changed("listen") {
		// Only when given: the default's port taken, ferry run picks another.
		args = append(args, "--listen", f.listen)
	}
	r.SetArgs(args)
	r.SetOut(cmd.OutOrStdout())
	r.SetErr(io.Discard)
	r.SilenceErrors, r.SilenceUsage = true, true
	return r.ExecuteContext(cmd.Context())
}

// render is the task file of t under header.
func render(header string, t *config.Task) ([]byte, error) {
	data, err := yaml.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("write the reverse task: %w", err)
	}
	return append([]byte(header), data...), nil
}

// redacted is t with the credentials of its URIs replaced by ***, for a
// task printed rather than written to a file of its own: standard output
// ends up in terminals, logs and CI transcripts.
func redacted(t *config.Task) *config.Task {
	c := *t
	c.Source.URI, c.Target.URI = config.Redact(t.Source.URI), config.Redact(t.Target.URI)
	return &c
}
