// Package load is `ferry load`: YCSB-style load against a MongoDB
// deployment.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/flags"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// loadFlags are the flags of `ferry load`.
type loadFlags struct {
	uri, username, passwordEnv string
	phase                      string
	workload, distribution     string
	keyType                    string
	opts                       workload.Options
}

// NewCommand returns `ferry load`.
func NewCommand() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Generate YCSB-style load: insert records, then read, update, insert and delete them",
		Long: `load generates YCSB-style load against a MongoDB deployment.

The load phase inserts --recordcount documents {_id: user0000000042 (or 42),
field0..fieldN: random strings} with unordered insertMany batches. The run
phase executes a workload over them:

  a       50% reads, 50% updates
  b       95% reads, 5% updates
  c       100% reads
  insert  100% inserts of new keys
  mixed   reads, updates, inserts and deletes in the --*-proportion weights
          (default 40% inserts, 40% updates, 20% deletes: live load for a sync)

Keys are drawn uniformly or with YCSB's scrambled zipfian distribution. The
run phase ends after --operations or --duration, or on Ctrl-C. A progress
line is printed every 2s and a summary at the end.`,
		Example: `  # Load 100,000 records into ycsb.usertable on a local server
  ferry load --recordcount 100000

  # Run workload A over them for a minute, at most 500 operations per second
  ferry load --phase run --recordcount 100000 --workload a --duration 1m --rate 500

  # Live inserts, updates and deletes while a sync runs, until Ctrl-C;
  # the password comes from the environment and never appears in output
  export SRC_PASSWORD=...
  ferry load --uri 'mongodb://db-0.example:27017/?replicaSet=rs0' --username app \
    --password-env SRC_PASSWORD --phase both --recordcount 10000 \
    --workload mixed --insert-proportion 2 --update-proportion 2 --delete-proportion 1 --rate 50

  # Read-only load with integer keys, 16 threads, 1,000,000 operations
  ferry load --phase both --key-type int --recordcount 50000 --workload c \
    --threads 16 --operations 1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoadCommand(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.uri, "uri", "mongodb://127.0.0.1:27017/?directConnection=true", "MongoDB URI of the deployment (put credentials in --username and --password-env)")
	fl.StringVar(&f.username, "username", "", "user to authenticate as")
	fl.StringVar(&f.passwordEnv, "password-env", "", "environment variable holding the password")
	fl.StringVar(&f.opts.Database, "db", workload.DefaultDatabase, "database")
	fl.StringVar(&f.opts.Collection, "collection", workload.DefaultCollection, "collection")
	fl.StringVar(&f.phase, "phase", "load", "load, run or both (load then run)")
	fl.Int64Var(&f.opts.RecordCount, "recordcount", 1000, "records to load; the key space the run phase reads, updates and deletes in")
	fl.IntVar(&f.opts.FieldCount, "fieldcount", workload.DefaultFieldCount, "fields per document besides _id")
	fl.IntVar(&f.opts.FieldLength, "fieldlength", workload.DefaultFieldLength, "characters per field")
	fl.StringVar(&f.keyType, "key-type", string(workload.KeyString), "type of _id: string (user0000000042) or int")
	fl.StringVar(&f.workload, "workload", string(workload.WorkloadA), "run-phase mix: a, b, c, insert or mixed")
	fl.StringVar(&f.distribution, "distribution", string(workload.Zipfian), "how the run phase picks keys: zipfian or uniform")
	fl.Float64Var(&f.opts.ReadProportion, "read-proportion", 0, "weight of reads in the mixed workload")
	fl.Float64Var(&f.opts.UpdateProportion, "update-proportion", 0, "weight of updates in the mixed workload")
	fl.Float64Var(&f.opts.InsertProportion, "insert-proportion", 0, "weight of inserts in the mixed workload")
	fl.Float64Var(&f.opts.DeleteProportion, "delete-proportion", 0, "weight of deletes in the mixed workload")
	fl.IntVar(&f.opts.Threads, "threads", workload.DefaultThreads, "concurrent clients")
	fl.Int64Var(&f.opts.Operations, "operations", 0, "run-phase operations (0: no bound)")
	fl.DurationVar(&f.opts.Duration, "duration", 0, "run-phase duration, e.g. 30s or 5m (0: no bound)")
	fl.IntVar(&f.opts.BatchSize, "batch-size", workload.DefaultBatchSize, "documents per insertMany in the load phase")
	fl.Float64Var(&f.opts.Rate, "rate", 0, "operations (load phase: documents) per second over all threads (0: no cap)")
	fl.Int64Var(&f.opts.Seed, "seed", 0, "seed of the generated documents and operations")
	return cmd
}

func runLoadCommand(ctx context.Context, out io.Writer, f loadFlags) error {
	o := f.opts
	o.KeyType = workload.KeyType(f.keyType)
	o.Workload = workload.Workload(f.workload)
	o.Distribution = workload.Distribution(f.distribution)
	o.Progress = progressPrinter(out)

	doLoad, doRun := false, false
	switch f.phase {
	case "load":
		doLoad = true
	case "run":
		doRun = true
	case "both":
		doLoad, doRun = true, true
	default:
		return fmt.Errorf("--phase: unknown phase %q; use load, run or both", f.phase)
	}
	if f.passwordEnv != "" && f.username == "" {
		return errors.New("--password-env: a password needs a user; set --username too")
	}
	if doLoad {
		if err := o.ValidateLoad(); err != nil {
			return flags.WorkloadError(err)
		}
	}
	if doRun {
		if err := o.ValidateRun(); err != nil {
			return flags.WorkloadError(err)
		}
	}

	client, err := conn.Open(ctx, "uri", config.Endpoint{URI: f.uri, Username: f.username, PasswordEnv: f.passwordEnv},
		conn.Options{AppName: "ferry-load", MaxPoolSize: uint64(max(100, o.Threads+4))})
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	ns := o.Database + "." + o.Collection
	fmt.Fprintf(out, "ferry load: %s, %s\n", config.Redact(f.uri), ns)

	if doLoad {
		fmt.Fprintf(out, "load: %d records of %d fields x %d characters (%d bytes), %s keys, batches of %d, %d threads\n",
			o.RecordCount, o.FieldCount, o.FieldLength, o.DocumentSize(), o.KeyType, o.BatchSize, o.Threads)
		s, err := workload.Load(ctx, client, o)
		if done, err := summarise(ctx, out, s, err, f.uri, false); done {
			return err
		}
	}
	if doRun {
		m := o.Mix()
		bound := "until interrupted (Ctrl-C)"
		switch {
		case o.Operations > 0 && o.Duration > 0:
			bound = fmt.Sprintf("for %d operations or %s", o.Operations, o.Duration)
		case o.Operations > 0:
			bound = fmt.Sprintf("for %d operations", o.Operations)
		case o.Duration > 0:
			bound = "for " + o.Duration.String()
		}
		fmt.Fprintf(out, "run: workload %s (read %g, update %g, insert %g, delete %g), %s keys over %d records, %d threads, %s\n",
			o.Workload, m.Read, m.Update, m.Insert, m.Delete, o.Distribution, o.RecordCount, o.Threads, bound)
		s, err := workload.Run(ctx, client, o)
		unbounded := o.Operations == 0 && o.Duration == 0
		if _, err := summarise(ctx, out, s, err, f.uri, unbounded); err != nil {
			return err
		}
	}
	return nil
}

// summarise prints a phase's summary. done says whether the command must
// stop, with err as its result: the phase failed or was interrupted. An
// interruption is the normal end of an unbounded run (exit 0); elsewhere it
// exits 130 like a shell.
func summarise(ctx context.Context, out io.Writer, s workload.Stats, err error, uri string, interruptIsEnd bool) (bool, error) {
	fmt.Fprintln(out, s)
	switch {
	case err == nil:
		return false, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if interruptIsEnd {
			return true, nil
		}
		fmt.Fprintf(out, "%s: interrupted\n", s.Phase)
		return true, exit.Interrupted
	}
	return true, errors.New(config.RedactError(err, uri))
}

// progressPrinter prints ops done and the rate over the last interval and
// since the start.
func progressPrinter(out io.Writer) func(workload.Stats) {
	var lastOps int64
	var lastElapsed time.Duration
	var lastPhase string
	return func(s workload.Stats) {
		if s.Phase != lastPhase {
			lastOps, lastElapsed, lastPhase = 0, 0, s.Phase
		}
		rate := float64(s.Ops()-lastOps) / (s.Elapsed - lastElapsed).Seconds()
		lastOps, lastElapsed = s.Ops(), s.Elapsed
		fmt.Fprintf(out, "%s: %s %d ops, %.0f ops/s (%.0f ops/s overall), %d errors, p99 %s\n",
			s.Phase, s.Elapsed.Round(time.Second), s.Ops(), rate, s.OpsPerSec, s.Errors, s.P99.Round(time.Millisecond))
	}
}
