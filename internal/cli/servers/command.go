package servers

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
)

// defaultOplogMiB is the source's oplog size: as the demo's, large enough
// for a live load of tens of operations per second during a small copy.
const defaultOplogMiB = 64

// NewCommand returns `ferry servers`: the demo's two FerretDB servers, to
// try ferry run, cutover, verify and load on by hand.
func NewCommand() *cobra.Command {
	var oplogMiB int64
	cmd := &cobra.Command{
		Use:   "servers",
		Short: "Start two embedded FerretDB servers (source and target) to try ferry run on, until Ctrl-C",
		Long: `servers starts the two throwaway FerretDB servers ferry demo runs on: a source
with an oplog (so that changes replay) and a target, on free loopback ports.
It prints their URIs and a task file for them, then keeps them running until
Ctrl-C, which stops them and removes their data.

In another terminal: save the task file, load data into the source with
ferry load, and run the task with ferry run; ferry verify, ferry cutover and
ferry load --phase run (a live load) work on them too. FerretDB is a
MongoDB stand-in: see the README's notes on what it does not do.`,
		Example: `  ferry servers
  # then, in another terminal, with the URIs it printed:
  ferry load --uri 'mongodb://127.0.0.1:PORT/?directConnection=true' --recordcount 20000
  ferry run -f task.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if oplogMiB < 1 {
				return fmt.Errorf("--oplog-size: must be at least 1 (MiB), got %d", oplogMiB)
			}
			ctx, stop := exit.OnSignal(cmd.Context())
			defer stop()
			return serveUntilDone(ctx, cmd.OutOrStdout(), oplogMiB)
		},
	}
	cmd.Flags().Int64Var(&oplogMiB, "oplog-size", defaultOplogMiB, "capped size of the source's oplog in MiB: it must hold every change made while a copy runs")
	return cmd
}

// serveUntilDone starts the servers, prints how to use them and keeps them
// until ctx ends (Ctrl-C): then it stops them and exits 130.
func serveUntilDone(ctx context.Context, out io.Writer, oplogMiB int64) error {
	fmt.Fprintf(out, "Starting two FerretDB servers (%s)...\n", Version(ctx))
	pair, err := StartPair(ctx, oplogMiB<<20)
	if err != nil {
		return err
	}
	defer pair.Stop()
	fmt.Fprintf(out, `
  source  %s   (oplog %d MiB)
  target  %s

A task file for them: save it as task.yaml, then run ferry run -f task.yaml
(copy, then replay the source's changes until Ctrl-C).

name: try
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
verify: {mode: hash}

Data for the source: ferry load --uri %q --recordcount 20000
A live load while it replays: ferry load --uri %q --phase run --rate 20 --duration 5m

Ctrl-C stops both servers and removes their data.
`, pair.Source.URI, oplogMiB, pair.Target.URI, pair.Source.URI, pair.Target.URI, pair.Source.URI, pair.Source.URI)
	<-ctx.Done()
	fmt.Fprintln(out, "\nservers: stopped; their data is removed")
	return exit.Interrupted
}
