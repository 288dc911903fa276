package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// openTask opens the demo's task: fullAndIncremental from source to dst,
// verified with hashes, keeping only the documents filters select.
func openTask(ctx context.Context, name string, source config.Endpoint, dst *ferretdb.Server, log *slog.Logger, filters ...config.Filter) (*engine.Engine, error) {
	task := &config.Task{Name: name, Spec: config.Spec{
		Mode:       config.ModeFullAndIncremental,
		Source:     source,
		Target:     config.Endpoint{URI: dst.URI},
		Verify:     config.Verify{Mode: config.VerifyHash},
		Namespaces: config.Namespaces{Filters: filters},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		return nil, err
	}
	return engine.Open(ctx, task, engine.Options{Log: log})
}

// startLoad runs the live load on the source until the returned stop is
// called (at once with rate 0: no load); stop waits for it and returns its
// error, and may be called again.
func startLoad(ctx context.Context, rate float64, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		if rate <= 0 {
			<-ctx.Done()
			done <- nil
			return
		}
		done <- run(ctx)
	}()
	var (
		once sync.Once
		err  error
	)
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// start runs the task, showing its progress on stderr; stop ends the
// progress display, runDone has Run's result.
func start(ctx context.Context, eng *engine.Engine, mode string) (stop func(), runDone <-chan error) {
	stop = progress.Show(ctx, progress.Mode(mode), os.Stderr, slog.New(slog.NewTextHandler(os.Stderr, nil)), 5*time.Second, eng.Status)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	return stop, done
}

// printReport prints the verification report, when there is one.
func printReport(out io.Writer, eng *engine.Engine) {
	fmt.Fprintln(out)
	if rep := eng.VerifyReport(); rep != nil {
		_ = rep.WriteTable(out)
		fmt.Fprintln(out)
	}
}

// verdict is the summary's line on verification.
func verdict(st engine.Status, runErr error) string {
	switch {
	case runErr != nil && st.Verify != nil && !st.Verify.OK:
		return "DIFFERENCES in " + strings.Join(st.Verify.Differing, ", ")
	case runErr != nil:
		return "FAILED: " + runErr.Error()
	case st.Verify == nil:
		return "not run"
	}
	return "OK"
}
