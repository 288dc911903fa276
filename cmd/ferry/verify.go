package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// verifyProgressEvery is how often `ferry verify` prints a progress line.
const verifyProgressEvery = 2 * time.Second

func init() {
	commands = append(commands, newVerifyCommand())
}

type verifyFlags struct {
	file        string
	mode        string
	sampleSize  int
	maxExamples int
}

func newVerifyCommand() *cobra.Command {
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

Exit status: 0 when every namespace matches, 2 when differences were found,
1 on errors.`,
		Example: `  # Compare with the task's verify.mode (hash unless set)
  ferry verify -f task.yaml

  # Only compare document counts (fast)
  ferry verify -f task.yaml --mode count

  # Compare 5000 random documents per collection
  ferry verify -f task.yaml --mode sample --sample-size 5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVerify(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "task file (YAML)")
	fl.StringVar(&f.mode, "mode", "", "count, hash or sample (default: the task's verify.mode)")
	fl.IntVar(&f.sampleSize, "sample-size", 0, "documents compared per collection in sample mode (default: the task's verify.sampleSize)")
	fl.IntVar(&f.maxExamples, "max-examples", verify.DefaultMaxExamples, "example _ids listed per kind of difference and namespace")
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
	mode := task.Verify.Mode
	switch {
	case cmd.Flags().Changed("mode"):
		mode = config.VerifyMode(f.mode)
		if mode != config.VerifyCount && mode != config.VerifyHash && mode != config.VerifySample {
			return fmt.Errorf("--mode: %q is not a mode: use count, hash or sample", f.mode)
		}
	case mode == config.VerifyNone || mode == "":
		fmt.Fprintln(stderr, "verify: the task sets verify.mode: none; comparing hashes (choose with --mode)")
		mode = config.VerifyHash
	}
	sampleSize := task.Verify.SampleSize
	if cmd.Flags().Changed("sample-size") {
		if f.sampleSize < 1 {
			return fmt.Errorf("--sample-size: must be at least 1, got %d", f.sampleSize)
		}
		sampleSize = f.sampleSize
	}
	if f.maxExamples < 1 {
		return fmt.Errorf("--max-examples: must be at least 1, got %d", f.maxExamples)
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
	fmt.Fprintf(stderr, "verify: task %s, %s, mode %s: source %s, target %s\n",
		task.Name, namespaces(len(colls)), mode, config.Redact(task.Source.URI), config.Redact(task.Target.URI))

	pl := newProgressLine(stderr, colls, mode)
	stop := pl.start(verifyProgressEvery)
	rep, runErr := verify.Run(ctx, source, target, colls, verify.Options{
		Mode:        mode,
		SampleSize:  sampleSize,
		MaxExamples: f.maxExamples,
		Progress:    pl.update,
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
		return exitError{code: workerapi.ExitVerificationFailed}
	}
	fmt.Fprintf(stdout, "\nevery namespace matches (%d compared%s)\n", compared, skippedNote)
	return nil
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

// progressLine prints the newest progress of verify.Run to w at a fixed
// interval.
type progressLine struct {
	w     io.Writer
	mode  config.VerifyMode
	index map[string]int
	n     int
	began time.Time
	mu    sync.Mutex
	ns    string
	done  int64
	total int64
}

func newProgressLine(w io.Writer, colls []catalog.Collection, mode config.VerifyMode) *progressLine {
	p := &progressLine{w: w, mode: mode, index: make(map[string]int, len(colls)), n: len(colls), began: time.Now()}
	for i, c := range colls {
		p.index[c.Source.String()] = i + 1
	}
	return p
}

// update is the verify.Options.Progress callback.
func (p *progressLine) update(ns string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ns != p.ns {
		p.ns, p.done, p.total = ns, 0, 0
	}
	p.done, p.total = max(p.done, done), max(p.total, total)
}

// start prints a line every interval until the returned stop is called.
func (p *progressLine) start(interval time.Duration) (stop func()) {
	ticker := time.NewTicker(interval)
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-quit:
				return
			case <-ticker.C:
				p.print()
			}
		}
	}()
	return func() {
		ticker.Stop()
		close(quit)
		<-finished
	}
}

func (p *progressLine) print() {
	p.mu.Lock()
	ns, done, total := p.ns, p.done, p.total
	p.mu.Unlock()
	if ns == "" {
		return
	}
	var docs string
	switch {
	case p.mode == config.VerifyCount:
		docs = "counting documents"
	case total > 0:
		docs = fmt.Sprintf("%d of about %d documents read", done, total)
	default:
		docs = fmt.Sprintf("%d documents read", done)
	}
	fmt.Fprintf(p.w, "verify: %s (%d of %d): %s, %s elapsed\n",
		ns, p.index[ns], p.n, docs, time.Since(p.began).Round(time.Second))
}
