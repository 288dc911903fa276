// Package run is `ferry run`: run a sync task until it completes or
// fails, serving /metrics and /status; for a sharded source, one shard's
// worker (shardmap.go).
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/metrics"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// DefaultListen is --listen's default address. When its port is taken (a
// second ferry run on the host) a free port is used instead; an address
// the user gave is used or refused.
const DefaultListen = "127.0.0.1:9750"

// cutoverLinger is how long a worker serves /status after its cut-over
// completed: the manager polls every 5 seconds.
const cutoverLinger = 12 * time.Second

// Flags are the flags of `ferry run`, which `ferry cutover` shares.
type Flags struct {
	file             string
	taskEnv          string
	listen           string
	progress         string
	progressInterval time.Duration
	logFormat        string
	logLevel         string
	untilCaughtUp    bool
	shard            string
	tls              workertls.Files
	statusClient     string
	discoverEvery    time.Duration
	awaitShardMap    bool
	copyOnly         bool
	cpuProfile       string
	// Edit, when set, changes the task once it is loaded (ferry cutover
	// requests the cut-over with it).
	Edit func(*config.Task) error
	// changed reports whether the user set a flag (cobra's); nil: none.
	changed func(name string) bool
}

// runHelp is `ferry run --help`.
const runHelp = `run executes the task in a task file until it completes or fails.

Progress is kept in the target's checkpoint database (mongoferry by default):
run the same command again after a crash or Ctrl-C and it continues where it
stopped, without copying finished ranges again.

While it runs, --listen serves /metrics (Prometheus), /status (JSON) and
/healthz; when its default's port is taken (another ferry run on this host)
a free port is used and logged, and an address given with --listen that is
taken stops the run.

Exit codes: 0 done, 1 failed, 2 verification found differences, 3 the
source's oplog no longer holds the checkpoint (OplogWindowLost), 4 the
cut-over failed at any step, its verification included, or cannot run (the
message says which step and why), 130 interrupted.

With mode incremental or fullAndIncremental, replay follows the copy and
runs until interrupted; --until-caught-up ends it once the target has
everything the source wrote, then verifies: the cut-over step.

A sharded source (source.kind sharded, or auto and a mongos at source.uri)
is copied shard by shard (fullSync.shardedCopy perShard: each collection
sharded on a ranged key read from its shards directly, orphans left out;
router: through mongos) and replayed by one subtask per shard, each
tailing its shard's oplog from its own checkpoint; source.shards[] gives
shard addresses when config.shards' are not reachable from here.
--shard NAME (or MONGOFERRY_SHARD) runs one shard's subtask only, as one
worker per shard does (an operator's worker finds its shard by its pod
ordinal in MONGOFERRY_SHARD_MAP): the worker of the shard whose name sorts first
records the start positions and leads the full copy, every worker copies
its own shard's part of it and helps with the rest (ranges no worker
holds, and what is read through mongos), the others then wait for the
copy to end,
and verification is left to 'ferry verify' once every worker caught up.

With fullSync.workers above 1 (a replica-set source), the task's run
shares its full copy: it plans every collection's _id ranges and claims
each range through a lease on the target before copying it, and 'ferry
run --copy-only' on the same task file, on this host or others, claims
and copies ranges too until the task's run records the copy done. A
killed worker's range is taken over by another after 20 seconds.

--discover-interval makes the run discover the source (hello, then
config.shards) at start and at that interval and report it in /status: the
operator learns a source's shards from its workers. --await-shard-map (the
operator's first worker, before the shards are known) copies and replays
nothing on a sharded source: it reports the shards and waits to be
restarted with one; on a replica set it runs the task as usual.

With cutover.requested: true in the task file, run does what 'ferry
cutover' does (see its help). One run of a task at a time: a second one,
here or elsewhere, stops at the start while the first holds the task's
lease in the checkpoint database.`

// NewCommand returns `ferry run`.
func NewCommand() *cobra.Command {
	var f Flags
	cmd := &cobra.Command{
		Use:   "run (-f task.yaml | --task-env VAR)",
		Short: "Run a sync task: copy, then replay the source's changes until Ctrl-C (mode full: copy, then verify)",
		Long:  runHelp,
		Example: `  # copy everything from one deployment to another, then verify
  ferry run -f task.yaml

  # log lines instead of a progress bar, metrics on another port
  ferry run -f task.yaml --progress log --listen 127.0.0.1:9999

  # copy, replay until caught up with the source, verify: a cut-over
  ferry run -f task.yaml --until-caught-up

  # one worker of a sharded source, replaying shard rs1 only
  ferry run -f task.yaml --shard rs1

  # with fullSync.workers: 3, two more processes share the copy
  ferry run -f task.yaml --copy-only

  # a minimal task.yaml
  name: orders-move
  mode: full
  source: {uri: "mongodb://10.0.0.1:27017/", username: ferry, passwordEnv: SRC_PASSWORD}
  target: {uri: "mongodb://10.0.0.2:27017/"}
  namespaces: {include: ["shop\\..*"], rename: [{from: shop, to: shop_v2}]}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.cpuProfile != "" {
				stop, err := measure.StartCPUProfile(f.cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return Run(cmd.Context(), f)
		},
	}
	AddFlags(cmd, &f)
	addRunFlags(cmd, &f)
	return cmd
}

// addRunFlags adds the flags of `ferry run` that `ferry cutover` does not
// share: what part of the task this process runs.
func addRunFlags(cmd *cobra.Command, f *Flags) {
	copyOnly := strings.TrimPrefix(workerapi.FlagCopyOnly, "--")
	cmd.Flags().BoolVar(&f.untilCaughtUp, "until-caught-up", false, "with replay: stop once everything the source wrote is applied, then verify (for a cut-over); without it replay runs until interrupted")
	cmd.Flags().StringVar(&f.shard, "shard", os.Getenv(workerapi.EnvShard), "sharded source: run only this shard's replay subtask (its name in config.shards); default $MONGOFERRY_SHARD, empty runs every shard")
	cmd.Flags().BoolVar(&f.copyOnly, copyOnly, false,
		"with fullSync.workers above 1: only help the task's run with its full copy (copy ranges of its plan claimed through leases), then exit once it records the copy done")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (read it with go tool pprof; ferry bench peer --cpuprofile uses it)")
	cmd.MarkFlagsMutuallyExclusive(copyOnly, "shard")
	cmd.MarkFlagsMutuallyExclusive(copyOnly, "until-caught-up")
	cmd.MarkFlagsOneRequired("file", "task-env")
	cmd.MarkFlagsMutuallyExclusive("file", "task-env")
}

// AddFlags adds the flags `ferry run` shares with `ferry cutover`: the
// task's source, the status server, progress and logs.
func AddFlags(cmd *cobra.Command, f *Flags) {
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "task file (YAML)")
	cmd.Flags().StringVar(&f.taskEnv, "task-env", "", "read the task (YAML) from this environment variable instead of a file (how the operator's workers get it)")
	f.changed = cmd.Flags().Changed
	cmd.Flags().StringVar(&f.listen, "listen", DefaultListen, "address for /metrics, /status and /healthz; empty to disable (the default's port taken, by another ferry run on this host, a free one is picked and logged)")
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "progress output: auto (bar on a terminal, log lines otherwise), bar, log or none")
	cmd.Flags().DurationVar(&f.progressInterval, "progress-interval", 10*time.Second, "interval between progress log lines")
	cmd.Flags().StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().StringVar(&f.tls.Cert, "tls-cert-file", "", "serve --listen over HTTPS with this certificate (PEM); /status then answers only a client certificate for --status-client signed by --tls-client-ca-file")
	cmd.Flags().StringVar(&f.tls.Key, "tls-key-file", "", "the private key (PEM) of --tls-cert-file")
	cmd.Flags().StringVar(&f.tls.ClientCA, "tls-client-ca-file", "", "CA (PEM) whose client certificates are accepted; /metrics and /healthz need no client certificate")
	cmd.Flags().StringVar(&f.statusClient, "status-client", workertls.ManagerName, "with --tls-cert-file: the common name of the one client certificate /status answers (the operator's manager)")
	cmd.Flags().DurationVar(&f.discoverEvery, strings.TrimPrefix(workerapi.FlagDiscoverInterval, "--"), 0,
		"discover the source's topology (hello, config.shards) at start and then at this interval, and report it in /status (how the operator learns a sharded source's shards); 0 disables")
	cmd.Flags().BoolVar(&f.awaitShardMap, strings.TrimPrefix(workerapi.FlagAwaitShardMap, "--"), false,
		"with no shard given (--shard, $MONGOFERRY_SHARD_MAP): on a sharded source copy and replay nothing, report the shards in /status and wait to be restarted with a shard (the operator's first worker); on a replica set run as usual")
	cmd.MarkFlagsRequiredTogether("tls-cert-file", "tls-key-file", "tls-client-ca-file")
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", format)
}

// limitMemory sets the Go soft memory limit from cache.maxBytes (unless
// GOMEMLIMIT is set), so the heap the garbage collector lets grow stays in
// proportion to the configured buffer rather than to luck.
func limitMemory(spec *config.Spec, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	maxBytes, err := spec.Cache.MaxBytes.Bytes()
	if err != nil {
		return
	}
	limit := maxBytes + 64<<20
	debug.SetMemoryLimit(limit)
	log.Debug("memory limit", "bytes", limit)
}

// Run runs the task of f until it completes, fails or ctx ends.
func Run(ctx context.Context, f Flags) error {
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	mode := progress.Mode(f.progress)
	if !mode.Valid() {
		return fmt.Errorf("--progress: %q is not one of auto, bar, log, none", f.progress)
	}
	task, err := loadTask(f)
	if err != nil {
		return err
	}
	limitMemory(&task.Spec, log)
	slot, err := workerShard(f.shard, os.Getenv, osHostname)
	if err != nil {
		return err
	}
	var watch *watcher
	if f.discoverEvery > 0 || f.awaitShardMap {
		watch = newWatcher(discoverSource(task.Source), f.discoverEvery, log)
	}
	if f.awaitShardMap && slot.Name == "" {
		if waited, err := awaitShardMap(ctx, task, watch, f, log); waited || err != nil {
			return err
		}
	}
	if watch != nil && f.discoverEvery > 0 {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		watch.start(wctx)
	}
	if slot.Retired {
		return idleRetired(ctx, task, slot.Name, f, watch, log)
	}
	f.shard = slot.Name
	latency := metrics.WriteLatency(task.Name)
	insertLatency := latency.WithLabelValues("insert")
	eng, err := engine.Open(ctx, task, engine.Options{Log: log, UntilCaughtUp: f.untilCaughtUp, Shard: f.shard, CopyOnly: f.copyOnly,
		ObserveWrite:  func(d time.Duration) { insertLatency.Observe(d.Seconds()) },
		ObserveReplay: func(op string, d time.Duration) { latency.WithLabelValues(op).Observe(d.Seconds()) }})
	if err != nil {
		return err
	}
	defer eng.Close()

	if f.listen != "" {
		reg := metrics.NewRegistry(metrics.NewCollector(eng.Status), latency)
		status := func() engine.Status {
			s := eng.Status()
			s.Topology = watch.snapshot()
			return s
		}
		stopServing, err := serve(f, workerapi.Handler(metrics.HTTPHandler(reg), status, verifyAnswer(eng.StartVerifyStreaming)), log)
		if err != nil {
			return err
		}
		defer stopServing()
	}
	log.Info("starting", "task", task.Name, "mode", task.Mode, "source", config.Redact(task.Source.URI), "target", config.Redact(task.Target.URI))
	stop := progress.Show(ctx, mode, os.Stderr, log, f.progressInterval, eng.Status)
	err = eng.Run(ctx)
	stop()
	s := reportOutcome(ctx, f, eng, err == nil, log)
	if err != nil {
		code := exitCode(ctx, err)
		switch code {
		case workerapi.ExitFailed:
			return err
		case workerapi.ExitInterrupted:
			log.Info("stopped; run the same command again to continue from the checkpoint", "task", task.Name)
		default:
			exit.Print(os.Stderr, f.logFormat, err)
		}
		return exit.Error{Code: code}
	}
	log.Info("done", "task", task.Name, "phase", s.Phase, "documents", s.Copy.Documents, "bytes", s.Copy.Bytes,
		"copiedHere", s.Copy.CopiedThisRun, "copiedHereBytes", s.Copy.CopiedBytesThisRun,
		"seconds", fmt.Sprintf("%.1f", s.ElapsedSeconds), "peakBufferedBytes", s.Copy.PeakBufferedBytes, "peakRSSBytes", procstat.SelfPeakRSS())
	idleCopyWorker(ctx, f, log)
	return nil
}

// idleCopyWorker keeps an operator's copy-only worker whose copy is done
// running until it is stopped: exiting would restart its pod until the
// manager scales the copy workers to zero.
func idleCopyWorker(ctx context.Context, f Flags, log *slog.Logger) {
	if f.copyOnly && f.taskEnv != "" {
		log.Info("copy-only worker: idle until the operator removes it")
		<-ctx.Done()
	}
}

// loadTask reads the task from the environment variable --task-env names
// (an operator's worker) or from the task file, and applies f.Edit.
func loadTask(f Flags) (*config.Task, error) {
	var task *config.Task
	var err error
	if f.taskEnv != "" {
		data, ok := os.LookupEnv(f.taskEnv)
		if !ok {
			return nil, fmt.Errorf("--task-env: environment variable %s is not set", f.taskEnv)
		}
		if task, err = config.Parse([]byte(data)); err != nil {
			return nil, fmt.Errorf("task from $%s: %w", f.taskEnv, err)
		}
	} else if task, err = config.Load(f.file); err != nil {
		return nil, err
	}
	if f.Edit != nil {
		if err := f.Edit(task); err != nil {
			return nil, err
		}
	}
	return task, nil
}

// reportOutcome reports the verification and the cut-over the run made:
// as tables on stdout, or as log records under --log-format json (stdout
// then holds one JSON object per line). ok says the run succeeded. It
// returns the engine's last status.
func reportOutcome(ctx context.Context, f Flags, eng *engine.Engine, ok bool, log *slog.Logger) engine.Status {
	json := f.logFormat == exit.LogFormatJSON
	if rep := eng.VerifyReport(); rep != nil {
		if json {
			logVerifyReport(log, rep)
		} else {
			_ = rep.WriteTable(os.Stdout)
		}
	}
	s := eng.Status()
	if s.Cutover != nil {
		if json {
			logCutoverSummary(log, s)
		} else {
			writeCutoverSummary(os.Stdout, s)
		}
		if ok && f.listen != "" && f.taskEnv != "" {
			// An operator's worker (its task comes from the environment):
			// the manager reads the completed cut-over (its positions and
			// verification) from /status, so serve it a while before
			// exiting. A failed one exits at once: its exit code (4) and
			// message reach the manager through the pod.
			select {
			case <-ctx.Done():
			case <-time.After(cutoverLinger):
			}
		}
	}
	return s
}

// listen opens --listen. Two tasks on one host are normal: when the
// default address is taken and the user did not give one, it listens on a
// free port of the same host instead and logs which; an address the user
// gave that is taken fails naming the flag.
func listen(f Flags, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", f.listen)
	if err == nil {
		return ln, nil
	}
	explicit := f.changed != nil && f.changed("listen")
	if errors.Is(err, syscall.EADDRINUSE) && !explicit {
		host, _, _ := net.SplitHostPort(f.listen)
		if ln, ferr := net.Listen("tcp", net.JoinHostPort(host, "0")); ferr == nil {
			log.Warn("the default --listen address is taken (another ferry run on this host?): serving on a free port instead; set --listen to choose one",
				"default", f.listen, "addr", ln.Addr().String())
			return ln, nil
		}
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("--listen %s: the address is in use (another ferry run on this host?): give --listen another address, or --listen \"\" to serve nothing", f.listen)
	}
	return nil, fmt.Errorf("--listen %s: %w", f.listen, err)
}

// exitCode is the exit status of a run that ended with err (not nil).
// A cut-over's failure is ExitCutoverFailed whichever step failed, its
// verification included: the operator turns it into the cut-over's
// failure, and the message says which step it was. Only a lost oplog
// window, which needs a new copy whatever was running, comes first.
func exitCode(ctx context.Context, err error) int {
	if code := ExitCode(err); code != workerapi.ExitFailed || ctx.Err() == nil {
		return code
	}
	return workerapi.ExitInterrupted
}

// ExitCode is the exit code a run that ended with err exits with, from the
// sentinels users act on (workerapi's Exit* codes): ExitDone for nil, a
// failed cut-over's ExitCutoverFailed whatever step failed (its
// verification too), ExitFailed for an error that restarting may cure.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return workerapi.ExitDone
	case errors.Is(err, source.ErrOplogWindowLost):
		return workerapi.ExitOplogWindowLost
	case errors.Is(err, engine.ErrCutoverFailed), errors.Is(err, engine.ErrCutoverNotSupported):
		return workerapi.ExitCutoverFailed
	case errors.Is(err, engine.ErrVerificationFailed):
		return workerapi.ExitVerificationFailed
	}
	return workerapi.ExitFailed
}
