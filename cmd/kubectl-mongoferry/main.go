// Command kubectl-mongoferry is the kubectl plugin for MongoFerry
// SyncTasks (kubectl mongoferry status|suspend|resume|cutover|verify|
// reverse|logs). Install it with
//
//	go install github.com/mongoferry/mongoferry/cmd/kubectl-mongoferry@latest
//
// (or through krew, plugins/mongoferry.yaml); kubectl finds it on the PATH.
// The commands live in internal/kubectlplugin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/mongoferry/mongoferry/internal/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := kubectlplugin.NewCommand(kubectlplugin.Options{Streams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}})
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
