// Package verify is `ferry verify`: compare a task's target with its
// source, namespace by namespace.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	engineverify "github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// verifyProgressEvery is how often `ferry verify` prints a progress line.
const verifyProgressEvery = 2 * time.Second

// verifyFlags are the flags of `ferry verify`.
type verifyFlags struct {
	file        string
	mode        string
	sampleSize  int
	maxExamples int
	streaming   bool
}

// NewCommand returns `ferry verify`.
func NewCommand() *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify -f task.yaml",
		Short: "Compare the target with the source, namespace by namespace",
		Long: `verify compares every collection a task copies with its copy on the target
and prints one line per namespace, then the differences with example _ids.

Modes (--mode, else the task's verify.mode; hash when that is none):
  count   document counts on both sides
  hash    an order-independent hash of every document's bytes on both sides;
          when they differ, a second pass lists the _ids missing on the
          target, extra on the target and changed (same _id, other bytes)
  sample  counts, and --sample-size random source documents looked up by _id
          on the target and compared byte for byte

Documents are equal when their BSON bytes are: field order and value types
count. Compare while the source is quiet (or the task is caught up), or
changes in flight show up as differences. Views are skipped.

With --streaming it compares while the task keeps the target in sync and
the source keeps changing: documents by _id in batches, each mismatch
compared again once the task's replay checkpoint has passed the source's
position from when it was seen (verify.rechecks times), and only those
that persist reported, with their namespace and _id. Progress goes to
stderr every few seconds. The task must be running (ferry run, or a
SyncTask's worker, which also starts a pass on POST /verify).

Exit status: 0 when every namespace matches, 2 when differences were found,
1 on errors.`,
		Example: `  # Compare with the task's verify.mode (hash unless set)
  ferry verify -f task.yaml

  # Only compare document counts (fast)
  ferry verify -f task.yaml --mode count

  # Compare 5000 random documents per collection
  ferry verify -f task.yaml --mode sample --sample-size 5000

  # Compare while the task streams, reporting only lasting differences
  ferry verify -f task.yaml --streaming`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVerify(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "task file (YAML)")
	fl.StringVar(&f.mode, "mode", "", "count, hash or sample (default: the task's verify.mode)")
	fl.IntVar(&f.sampleSize, "sample-size", 0, "documents compared per collection in sample mode (default: the task's verify.sampleSize)")
	fl.IntVar(&f.maxExamples, "max-examples", engineverify.DefaultMaxExamples, "example _ids listed per kind of difference and namespace")
	fl.BoolVar(&f.streaming, "streaming", false, "compare while the source changes and the task replays: recheck mismatches after replay passed them, report only those that persist")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func runVerify(cmd *cobra.Command, f verifyFlags) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()

	task, err := config.Load(f.file)
	if err != nil {
		return err
	}
	mode, sampleSize, err := f.modeAndSample(cmd, task, stderr)
	if err != nil {
		return err
	}

	source, err := conn.Open(ctx, "source", task.Source, conn.Options{AppName: "mongoferry-verify"})
	if err != nil {
		return err
	}
	defer func() { _ = source.Disconnect(context.WithoutCancel(ctx)) }()
	target, err := conn.Open(ctx, "target", task.Target, conn.Options{AppName: "mongoferry-verify"})
	if err != nil {
		return err
	}
	defer func() { _ = target.Disconnect(context.WithoutCancel(ctx)) }()
	if err := conn.CheckDistinct(ctx, source, target); err != nil {
		return err
	}

	mapper, err := catalog.NewMapper(task.Namespaces, task.Checkpoint.Database)
	if err != nil {
		return err
	}
	colls, err := catalog.List(ctx, source, mapper)
	if err != nil {
		return redact(fmt.Errorf("source: %w", err), task)
	}
	if f.streaming {
		return runStreaming(ctx, stdout, stderr, task, source, target, colls)
	}
	fmt.Fprintf(stderr, "verify: task %s, %s, mode %s: source %s, target %s\n",
		task.Name, namespaces(len(colls)), mode, config.Redact(task.Source.URI), config.Redact(task.Target.URI))

	pl := progress.NewLine(stderr, colls, mode)
	stop := pl.Start(verifyProgressEvery)
	rep, runErr := engineverify.Run(ctx, source, target, colls, engineverify.Options{
		Mode:        mode,
		SampleSize:  sampleSize,
		MaxExamples: f.maxExamples,
		Progress:    pl.Update,
	})
	stop()

	if rep != nil && len(rep.Namespaces) > 0 {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	}
	if runErr != nil {
		return redact(runErr, task)
	}
	return printVerdict(stdout, rep)
}

// namespaces returns "1 namespace" or "n namespaces".
func namespaces(n int) string {
	if n == 1 {
		return "1 namespace"
	}
	return fmt.Sprintf("%d namespaces", n)
}

// redact removes anything credential-like of the task's URIs from err's
// message (a second line of defence: the task validator already refuses
// passwords in URIs).
func redact(err error, task *config.Task) error {
	msg := err.Error()
	for _, uri := range []string{task.Source.URI, task.Target.URI} {
		msg = config.RedactError(errors.New(msg), uri)
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// modeAndSample returns the verification's mode and sample size: the
// task's, or the flags' when given. A task that sets verify.mode none is
// compared by hash.
func (f verifyFlags) modeAndSample(cmd *cobra.Command, task *config.Task, stderr io.Writer) (config.VerifyMode, int, error) {
	mode := task.Verify.Mode
	switch {
	case cmd.Flags().Changed("mode"):
		mode = config.VerifyMode(f.mode)
		if mode != config.VerifyCount && mode != config.VerifyHash && mode != config.VerifySample {
			return "", 0, fmt.Errorf("--mode: %q is not a mode: use count, hash or sample", f.mode)
		}
	case mode == config.VerifyNone || mode == "":
		fmt.Fprintln(stderr, "verify: the task sets verify.mode: none; comparing hashes (choose with --mode)")
		mode = config.VerifyHash
	}
	sampleSize := task.Verify.SampleSize
	if cmd.Flags().Changed("sample-size") {
		if f.sampleSize < 1 {
			return "", 0, fmt.Errorf("--sample-size: must be at least 1, got %d", f.sampleSize)
		}
		sampleSize = f.sampleSize
	}
	if f.maxExamples < 1 {
		return "", 0, fmt.Errorf("--max-examples: must be at least 1, got %d", f.maxExamples)
	}
	return mode, sampleSize, nil
}

// printVerdict prints how many namespaces were compared, skipped and
// differ; differences exit with ExitVerificationFailed.
func printVerdict(stdout io.Writer, rep *engineverify.Report) error {
	compared, skipped := 0, 0
	for _, ns := range rep.Namespaces {
		if ns.Skipped {
			skipped++
		} else {
			compared++
		}
	}
	skippedNote := ""
	if skipped > 0 {
		skippedNote = fmt.Sprintf(", %d skipped", skipped)
	}
	if n := rep.Differing(); n > 0 {
		fmt.Fprintf(stdout, "\n%d of %d compared namespaces differ%s\n", n, compared, skippedNote)
		return exit.Error{Code: workerapi.ExitVerificationFailed}
	}
	fmt.Fprintf(stdout, "\nevery namespace matches (%d compared%s)\n", compared, skippedNote)
	return nil
}
