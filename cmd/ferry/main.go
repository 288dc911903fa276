// Command ferry runs MongoFerry's engine without Kubernetes: run a task,
// verify a target against its source, load test data, run the demo and
// benchmarks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "ferry:", err)
		os.Exit(1)
	}
}

// exitError ends the command with a code after the command has already told
// the user what happened.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Copy MongoDB data between deployments and keep it in sync",
		Long: `ferry runs MongoFerry's sync engine without Kubernetes.

A task file (YAML) names the source and target deployments, what to copy and
how hard to push; the same fields make up a SyncTask's spec in Kubernetes.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(commands...)
	return root
}

// commands are registered by each command's file.
var commands []*cobra.Command
