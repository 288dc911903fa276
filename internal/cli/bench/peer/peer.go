// Package peer is `ferry bench peer`: MongoShake's collector and MongoFerry,
// one after the other, each on a fresh pair of FerretDB servers with the
// same documents and the same live writes, watched from the target
// (peer.go: the command and the table; run.go: one side's run; tools.go:
// how each tool is started).
package peer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// benchPeerFlags are the flags of `ferry bench peer`.
type benchPeerFlags struct {
	peerBin                   string
	records                   int64
	inserts, updates, deletes int
	oplogMiB                  int64
	timeout                   time.Duration
	dir                       string
	cpuProfile                string
	ferryOnly                 bool
}

// NewCommand returns `ferry bench peer`.
func NewCommand() *cobra.Command {
	var f benchPeerFlags
	cmd := &cobra.Command{
		Use:   "peer",
		Short: "MongoShake's collector and MongoFerry side by side on the same data and live writes",
		Long: `peer runs a peer tool, MongoShake's collector (--peer-bin, built from its
source: see docs/benchmarks.md, "Beside MongoShake"), then MongoFerry ('ferry
run', this binary), each as its own process on a fresh pair of FerretDB
servers (built by 'make ferretdb' into bin/ferretdb): the source has a
--oplog-size MiB oplog and --records YCSB documents of ~1.1 KB.

Each tool runs a full copy followed by oplog replay. Both are watched the
same way, from the target: documents read by _id every 100 ms, and
collStats counts every 100 ms while the target is empty and as a count
nears its goal, about once a second in between (each collStats walks the
target's whole database). Each source trims its oplog every minute,
FerretDB's default (the oplog holds the whole run):

  start → first document   from the tool's process start until the target
                           holds a document;
  full copy done           until the target holds all --records documents;
  copy's own rate          documents per second from the first to the last;
  live inserts replayed    --inserts inserts on the source (2 clients) once
                           the copy is done, in ops/s from the first insert
                           until the target holds all of them;
  last update/delete       then --updates $set updates and --deletes deletes
                           (1 client), and the seconds from the source's
                           acknowledgement of the last of them until the
                           target shows every one.

It also prints each process's CPU seconds (the tool, the source, the target)
per phase, and the raw ceiling: insert_many of the same documents into a
fresh target server by 2 clients, the most any copy can write there.

Without --peer-bin only MongoFerry's side and the ceiling run. The tools'
logs (and MongoFerry's CPU profile with --cpuprofile) stay in --dir.`,
		Example: `  make bench-peer MONGOSHAKE=/path/to/MongoShake/bin/collector.linux
  ferry bench peer --peer-bin ./collector --records 50000 --inserts 2000 --updates 20 --deletes 20
  ferry bench peer --ferry-only --cpuprofile /tmp/peer.prof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := exit.OnSignal(cmd.Context())
			defer stop()
			return exit.Bench(ctx, cmd.OutOrStdout(), runBenchPeer(ctx, cmd.OutOrStdout(), f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.peerBin, "peer-bin", "", "MongoShake's collector binary (built from source without its two noCursorTimeout settings); empty: MongoFerry's side and the ceiling only")
	fl.BoolVar(&f.ferryOnly, "ferry-only", false, "run MongoFerry's side and the ceiling only, even with --peer-bin")
	fl.Int64Var(&f.records, "records", 50_000, "YCSB documents loaded into each source before its tool starts")
	fl.IntVar(&f.inserts, "inserts", 2000, "live inserts once the copy is on the target")
	fl.IntVar(&f.updates, "updates", 20, "live updates ($set of field0) of loaded documents after the inserts")
	fl.IntVar(&f.deletes, "deletes", 20, "live deletes of loaded documents after the inserts")
	fl.Int64Var(&f.oplogMiB, "oplog-size", 128, "capped size of each source's oplog in MiB, created before the load")
	fl.DurationVar(&f.timeout, "timeout", 15*time.Minute, "give up on a tool when a step has not shown on the target this long")
	fl.StringVar(&f.dir, "dir", "", "directory for the tools' configuration and logs (default: a new one under the temporary directory, kept)")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of MongoFerry's 'ferry run' to this file")
	return cmd
}

func (f benchPeerFlags) validate() error {
	switch {
	case f.records < 1:
		return fmt.Errorf("--records must be at least 1, got %d", f.records)
	case f.inserts < 1 || f.updates < 0 || f.deletes < 0 || f.updates+f.deletes < 1:
		return fmt.Errorf("--inserts must be at least 1 and --updates plus --deletes at least 1, got %d, %d, %d", f.inserts, f.updates, f.deletes)
	case int64(f.updates+f.deletes) > f.records:
		return fmt.Errorf("--updates plus --deletes (%d) touch distinct loaded documents and must not exceed --records (%d)", f.updates+f.deletes, f.records)
	case f.oplogMiB < 1:
		return fmt.Errorf("--oplog-size must be at least 1 (MiB), got %d", f.oplogMiB)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	if f.peerBin != "" {
		if _, err := os.Stat(f.peerBin); err != nil {
			return fmt.Errorf("--peer-bin: %w (build MongoShake's collector as docs/benchmarks.md says)", err)
		}
	}
	return nil
}

func (f benchPeerFlags) workloadOptions() workload.Options {
	return workload.Options{Database: measure.DB, Collection: measure.Collection, RecordCount: f.records,
		KeyType: workload.KeyString, Threads: 2, Seed: 1}
}

func runBenchPeer(ctx context.Context, out io.Writer, f benchPeerFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if f.dir == "" {
		d, err := os.MkdirTemp("", "ferry-bench-peer-")
		if err != nil {
			return err
		}
		f.dir = d
	}
	o := f.workloadOptions()
	fmt.Fprintln(out, "ferry bench peer: a peer tool and MongoFerry, one after the other, on fresh FerretDB pairs")
	measure.Header(out)
	fmt.Fprintf(out, "servers:   %s (SQLite), source oplog %d MiB, on this machine\n", servers.Version(ctx), f.oplogMiB)
	fmt.Fprintf(out, "documents: %d x %d bytes; then %d live inserts (2 clients), then %d updates and %d deletes (1 client)\n",
		f.records, o.DocumentSize(), f.inserts, f.updates, f.deletes)
	fmt.Fprintf(out, "logs:      %s\n", f.dir)

	var tools []tool
	if f.peerBin != "" && !f.ferryOnly {
		bin, err := filepath.Abs(f.peerBin)
		if err != nil {
			return err
		}
		tools = append(tools, mongoShake{bin: bin})
	} else {
		fmt.Fprintln(out, "peer:      none (--peer-bin not given): MongoFerry's side and the ceiling only")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tools = append(tools, mongoFerry{bin: self, cpuProfile: f.cpuProfile})

	var results []result
	for _, t := range tools {
		r, err := runTool(ctx, out, t, o, f)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name(), err)
		}
		results = append(results, r)
	}
	ceiling, err := rawCeiling(ctx, out, o)
	if err != nil {
		return fmt.Errorf("raw ceiling: %w", err)
	}
	printTable(out, results, ceiling, f)
	return nil
}

// rawCeiling loads the documents into a fresh target server (no oplog) with
// insert_many from 2 clients and returns the documents per second.
func rawCeiling(ctx context.Context, out io.Writer, o workload.Options) (float64, error) {
	fmt.Fprintf(out, "\nraw ceiling: insert_many of the %d documents into a fresh target (%s)... ", o.RecordCount, loadAverage())
	dst, err := servers.StartTarget(ctx)
	if err != nil {
		return 0, err
	}
	defer dst.Stop()
	c, err := dst.Client(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	ls, err := workload.Load(ctx, c, o)
	if err != nil {
		return 0, err
	}
	rate := ls.OpsPerSec
	fmt.Fprintf(out, "%.1fs = %s docs/s\n", ls.Elapsed.Seconds(), progress.Count(int64(rate)))
	return rate, nil
}

// printTable prints the figures of every side, with MongoFerry's against the
// peer's when both ran.
func printTable(out io.Writer, rs []result, ceiling float64, f benchPeerFlags) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	head := "figure"
	for _, r := range rs {
		head += "\t" + r.tool
	}
	if len(rs) == 2 {
		head += "\tMongoFerry against the peer"
	}
	fmt.Fprintln(tw, head+"\t")
	type row struct {
		name       string
		val        func(result) float64
		format     string
		lowerWins  bool
		better     string
		worse      string
		ratioShown bool
	}
	rows := []row{
		{name: "task start → first document on target (s)", val: func(r result) float64 { return r.firstDoc }, format: "%.1f", lowerWins: true, better: "sooner", worse: "later", ratioShown: true},
		{name: "full copy done (s)", val: func(r result) float64 { return r.copyDone }, format: "%.1f", lowerWins: true, better: "sooner", worse: "later", ratioShown: true},
		{name: "copy's own rate (docs/s, first to last document)", val: func(r result) float64 { return r.copyRate }, format: "%.0f", ratioShown: true},
		{name: fmt.Sprintf("live inserts replayed (ops/s, %d inserts)", f.inserts), val: func(r result) float64 { return r.insertRate }, format: "%.1f", ratioShown: true},
		{name: "last update/delete visible, after source's last op (s)", val: func(r result) float64 { return r.lastVisible }, format: "%.1f", lowerWins: true, better: "sooner", worse: "later", ratioShown: true},
		{name: "tool CPU s, start to copy done", val: func(r result) float64 { return r.cpuCopy.tool }, format: "%.1f", lowerWins: true, better: "less", worse: "more", ratioShown: true},
		{name: "tool CPU s, live writes to last visible", val: func(r result) float64 { return r.cpuReplay.tool }, format: "%.1f", lowerWins: true, better: "less", worse: "more", ratioShown: true},
		{name: "source CPU s, start to copy done", val: func(r result) float64 { return r.cpuCopy.source }, format: "%.1f"},
		{name: "target CPU s, start to copy done", val: func(r result) float64 { return r.cpuCopy.target }, format: "%.1f"},
		{name: "source CPU s, live writes to last visible", val: func(r result) float64 { return r.cpuReplay.source }, format: "%.1f"},
		{name: "target CPU s, live writes to last visible", val: func(r result) float64 { return r.cpuReplay.target }, format: "%.1f"},
	}
	for _, w := range rows {
		line := w.name
		for _, r := range rs {
			line += "\t" + fmt.Sprintf(w.format, w.val(r))
		}
		if len(rs) == 2 && w.ratioShown {
			line += "\t" + ratio(w.val(rs[0]), w.val(rs[1]), w.lowerWins, w.better, w.worse)
		} else if len(rs) == 2 {
			line += "\t"
		}
		fmt.Fprintln(tw, line+"\t")
	}
	fmt.Fprintf(tw, "raw ceiling: insert_many into a fresh target (docs/s)\t%.0f\t\n", ceiling)
	_ = tw.Flush()
	for _, r := range rs {
		fmt.Fprintf(out, "%s: %s at its start, %s at its end; log %s\n", r.tool, r.loadStart, r.loadEnd, r.log)
	}
}

// ratio says how MongoFerry's figure (b) compares with the peer's (a).
func ratio(a, b float64, lowerWins bool, better, worse string) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	if !lowerWins {
		return fmt.Sprintf("%.2fx", b/a)
	}
	if b <= a {
		return fmt.Sprintf("%.1fx %s", a/b, better)
	}
	return fmt.Sprintf("%.1fx %s", b/a, worse)
}

// loadAverage is the machine's load average line.
func loadAverage() string {
	l, err := procstat.LoadAverage()
	if err != nil {
		return "load average unknown"
	}
	return "load average " + l
}
