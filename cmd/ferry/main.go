// Command ferry runs MongoFerry's engine without Kubernetes: run a task,
// cut it over, verify a target against its source, reset a task's
// checkpoint, write its reverse sync, load test data, start throwaway
// servers, and run the demo and the benchmarks. The commands live in
// internal/cli (docs/cli.md).
package main

import (
	"context"
	"os"

	"github.com/mongoferry/mongoferry/internal/cli"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
)

func main() {
	ctx, stop := exit.OnSignal(context.Background())
	code := cli.Execute(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
