package verify

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	engineverify "github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// runStreaming runs one streaming verification pass against a pair the
// task keeps in sync, printing progress to stderr and the report to
// stdout.
func runStreaming(ctx context.Context, stdout, stderr io.Writer, task *config.Task, source, target *mongo.Client, colls []catalog.Collection) error {
	budget, err := task.Verify.MaxPendingBytes.Bytes()
	if err != nil {
		return fmt.Errorf("verify.maxPendingBytes: %w", err)
	}
	fmt.Fprintf(stderr, "verify: task %s, %s, streaming (%d rechecks, recheck budget %s): source %s, target %s\n",
		task.Name, namespaces(len(colls)), task.Verify.Rechecks, config.FormatBytes(budget),
		config.Redact(task.Source.URI), config.Redact(task.Target.URI))
	sv := engineverify.NewStreamer(source, target, engineverify.StreamOptions{
		Positions: &engineverify.CheckpointPositions{Source: source, Store: checkpoint.NewStore(target, task.Checkpoint.Database, task.Name)},
		Rechecks:  task.Verify.Rechecks, MaxPendingBytes: budget, Batch: task.Cache.BatchSize,
	})
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(verifyProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(stderr, streamProgress(sv.Status()))
			}
		}
	}()
	st, runErr := sv.Run(ctx, colls)
	close(done)
	writeStreamReport(stdout, st)
	if runErr != nil {
		return redact(runErr, task)
	}
	if !st.OK {
		return exit.Error{Code: workerapi.ExitVerificationFailed}
	}
	return nil
}

// streamProgress is one progress line.
func streamProgress(s engineverify.StreamStatus) string {
	where := "waiting for replay to pass the last mismatches"
	if s.CurrentNamespace != "" {
		where = fmt.Sprintf("%s (%d of %d)", s.CurrentNamespace, s.NamespacesDone+1, s.Namespaces)
	}
	line := fmt.Sprintf("verify: %s: %d documents compared, %d mismatches seen, %d resolved, %d pending rechecks, %d persisting",
		where, s.Compared, s.Mismatches, s.Resolved, s.PendingRechecks, s.Persisting)
	if s.PendingFull {
		line += fmt.Sprintf("; recheck budget full, %d not rechecked", s.NotRechecked)
	}
	return line
}

// writeStreamReport prints the pass's outcome.
func writeStreamReport(w io.Writer, s engineverify.StreamStatus) {
	fmt.Fprintf(w, "%d namespaces, %d documents compared, %d mismatches seen, %d resolved on recheck (changes in flight)\n",
		s.NamespacesDone, s.Compared, s.Mismatches, s.Resolved)
	for _, f := range s.Findings {
		fmt.Fprintf(w, "  %-8s %s _id %s\n", f.Kind, f.Namespace, f.ID)
	}
	if n := s.Persisting - int64(len(s.Findings)); n > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", n)
	}
	if s.NotRechecked > 0 {
		fmt.Fprintf(w, "%d mismatches were not rechecked: the recheck budget (verify.maxPendingBytes) was full; raise it and run again\n", s.NotRechecked)
	}
	if s.Unsettled > 0 {
		fmt.Fprintf(w, "%d mismatches were not rechecked: the task's checkpoint did not pass them in time; is the task running?\n", s.Unsettled)
	}
	switch {
	case s.Error != "":
		fmt.Fprintf(w, "\nthe pass stopped early: %s\n", s.Error)
	case s.OK:
		fmt.Fprintln(w, "\nevery compared document matches")
	case s.Persisting == 1:
		fmt.Fprintln(w, "\n1 document differs after every recheck")
	case s.Persisting > 0:
		fmt.Fprintf(w, "\n%d documents differ after every recheck\n", s.Persisting)
	default:
		fmt.Fprintln(w, "\nthe pass could not recheck every mismatch")
	}
}
