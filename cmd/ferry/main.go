// Command ferry runs MongoFerry's engine without Kubernetes: run a task,
// verify a target against its source, load test data, run the demo and
// benchmarks. The commands live in internal/cli.
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
