// Package cli is the ferry command line: the root command and its
// subcommands, one package each under internal/cli (run, cutover, reset,
// reverse, verify, load, demo, bench, servers, explain, version), with the pieces they share
// in exit, flags, progress and servers.
package cli

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench"
	"github.com/mongoferry/mongoferry/internal/cli/cutover"
	"github.com/mongoferry/mongoferry/internal/cli/demo"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/explain"
	"github.com/mongoferry/mongoferry/internal/cli/load"
	"github.com/mongoferry/mongoferry/internal/cli/reset"
	"github.com/mongoferry/mongoferry/internal/cli/reverse"
	"github.com/mongoferry/mongoferry/internal/cli/run"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/cli/verify"
	"github.com/mongoferry/mongoferry/internal/cli/version"
)

// NewRootCommand returns the ferry command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Copy MongoDB data between deployments and keep it in sync",
		Long: `ferry runs MongoFerry's sync engine without Kubernetes.

A task file (YAML) names the source and target deployments, what to copy and
how hard to push; the same fields make up a SyncTask's spec in Kubernetes.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(bench.NewCommand(), cutover.NewCommand(), demo.NewCommand(), explain.NewCommand(), load.NewCommand(), reset.NewCommand(), reverse.NewCommand(), run.NewCommand(), servers.NewCommand(), verify.NewCommand(), version.NewCommand())
	return root
}

// Execute runs the command line args until it ends or ctx does, prints an
// error the command has not told the user about to stderr (a JSON record
// when the command logs JSON: --log-format json), and returns the
// process's exit status.
func Execute(ctx context.Context, args []string, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	code, print := exit.Code(err)
	if print {
		exit.Print(stderr, logFormat(cmd), err)
	}
	return code
}

// logFormat is the --log-format cmd ran with, "" for a command without
// the flag.
func logFormat(cmd *cobra.Command) string {
	if cmd == nil {
		return ""
	}
	if f := cmd.Flags().Lookup("log-format"); f != nil {
		return f.Value.String()
	}
	return ""
}
