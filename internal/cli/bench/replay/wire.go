package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/internal/wiresim/wirebench"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
)

// Targets of `ferry bench replay --wire` for the DDT shape with 16
// writers on the 2-core development machine.
const (
	benchWireTargetNoDelay    = 300_000 // ops/s with no delay
	benchWireTargetDelayed    = 100_000 // ops/s with 1ms per write command
	benchWireTargetPerCommand = 100     // writes per command with 1ms per write command
	benchWireTargetWriters    = 16
)

// benchWireDefaultOps is the entries per round of `--wire` when --ops is
// not given: a round of the in-memory default (1M) takes minutes over
// the wire at today's rates.
const benchWireDefaultOps = 200_000

// benchWireFlags are the flags `--wire` adds to `ferry bench replay`.
type benchWireFlags struct {
	enabled     bool
	delays      []time.Duration
	wireVersion int32
	// opsGiven: --ops was set on the command line.
	opsGiven bool
}

func addBenchWireFlags(fl *pflag.FlagSet, f *benchWireFlags) {
	fl.BoolVar(&f.enabled, "wire", false, "replay over the MongoDB wire protocol: the real tailer and replayer against two in-process servers (see above)")
	fl.DurationSliceVar(&f.delays, "delay", []time.Duration{0}, "with --wire: how long the target waits before acknowledging each write command; several (0,500us,1ms) run in turn")
	fl.Int32Var(&f.wireVersion, "wire-version", wiresim.WireVersion80, "with --wire: the servers' maxWireVersion (25 MongoDB 8.0, 21 7.0, 17 6.0, 13 5.0, 9 4.4)")
}

func (f benchReplayFlags) validateWire() error {
	if err := f.validate(); err != nil {
		return err
	}
	switch {
	case f.shards > 1:
		return fmt.Errorf("--shards %d: --wire replays one replica set; sharded replay is measured without --wire", f.shards)
	case f.wire.wireVersion < wiresim.WireVersion44 || f.wire.wireVersion > wiresim.WireVersion80:
		return fmt.Errorf("--wire-version must be between %d (MongoDB 4.4, the driver's oldest) and %d (8.0), got %d",
			wiresim.WireVersion44, wiresim.WireVersion80, f.wire.wireVersion)
	case len(f.wire.delays) == 0:
		return fmt.Errorf("--delay needs at least one duration")
	}
	for _, d := range f.wire.delays {
		if d < 0 || d > 10*time.Second {
			return fmt.Errorf("--delay %s: want 0 to 10s", d)
		}
	}
	return nil
}

// benchWireGroup is what the rounds of one shape and delay measured.
type benchWireGroup struct {
	in      *replaybench.Input
	delay   time.Duration
	rounds  []wirebench.Result
	peakRSS int64
	// others is what other processes used during the rounds.
	others measure.Others
}

// runBenchReplayWire is `ferry bench replay --wire`.
func runBenchReplayWire(ctx context.Context, out io.Writer, f benchReplayFlags) error {
	if err := f.validateWire(); err != nil {
		return err
	}
	if !f.wire.opsGiven {
		f.ops = benchWireDefaultOps
	}
	shapes, _ := f.shapes()
	version := map[int32]string{wiresim.WireVersion80: "8.0", wiresim.WireVersion70: "7.0", wiresim.WireVersion60: "6.0", wiresim.WireVersion50: "5.0", wiresim.WireVersion44: "4.4"}[f.wire.wireVersion]
	fmt.Fprintln(out, "ferry bench replay --wire: generated oplog -> wire -> tailer -> replay pipeline -> wire -> acknowledging target")
	measure.Header(out)
	fmt.Fprintf(out, "servers:   two in-process wiresim servers on loopback (replica-set primaries, wire version %d", f.wire.wireVersion)
	if version != "" {
		fmt.Fprintf(out, ", MongoDB %s", version)
	}
	fmt.Fprintln(out, "); the source serves the generated oplog, the target counts each write command and acknowledges it after --delay")
	fmt.Fprintf(out, "pipeline:  the engine's tailer (tailable awaitData cursor, %d entries per read) and replayer: %d writers, batches of up to %d writes, cache.maxBytes %s, checkpoints saved to the target; %d rounds per shape and delay\n",
		f.readBatch, f.writers, f.batch, config.DefaultMaxBytes, f.rounds)
	fmt.Fprintln(out, "leaves out: the servers' own work (the target stores nothing: no documents, indexes, journal, replication or write concern waits)")
	fmt.Fprintln(out, "           and the network (loopback, no TLS, no compression); the servers run in this process, so CPU figures include theirs")

	if f.cpuProfile != "" {
		stop, err := measure.StartCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer func() {
			stop()
			fmt.Fprintf(out, "CPU profile of the rounds: %s (read with: go tool pprof -top %s %s)\n", f.cpuProfile, os.Args[0], f.cpuProfile)
		}()
	}
	var groups []benchWireGroup
	for _, shape := range shapes {
		start := time.Now()
		in, err := replaybench.Generate(shape, f.pool, replaybench.Mix{}, 1)
		if err != nil {
			return err
		}
		c := in.Counts(f.ops)
		fmt.Fprintf(out, "\n%s: %d entries per round (%d inserts, %d $v:2 updates, %d deletes) over %d collection(s), documents of %d bytes, entries of %.0f bytes on average; pool of %d entries generated in %.1fs\n",
			shape, f.ops, c.Inserts, c.Updates, c.Deletes, in.Collections, in.DocBytes, in.EntryBytes(), len(in.Entries), time.Since(start).Seconds())
		for _, delay := range f.wire.delays {
			g, err := benchWireRounds(ctx, out, f, in, delay)
			if err != nil {
				return err
			}
			groups = append(groups, g)
		}
	}
	fmt.Fprintln(out)
	printBenchWireTable(out, f, groups)
	return nil
}

// benchWireRounds replays one shape with one delay f.rounds times.
func benchWireRounds(ctx context.Context, out io.Writer, f benchReplayFlags, in *replaybench.Input, delay time.Duration) (benchWireGroup, error) {
	g := benchWireGroup{in: in, delay: delay}
	runtime.GC()
	debug.FreeOSMemory()
	rssReset := measure.ResetPeakRSS()
	cfg := wirebench.Config{Ops: f.ops, Writers: f.writers, BatchSize: f.batch, ReadBatch: f.readBatch, Delay: delay, MaxWireVersion: f.wire.wireVersion}
	var res wirebench.Result
	round := func(r int) (time.Duration, error) {
		var err error
		if res, err = wirebench.Run(ctx, in, cfg); err != nil {
			return 0, fmt.Errorf("%s delay %s round %d: %w", in.Shape, delay, r, err)
		}
		return res.Elapsed, nil
	}
	report := func(r int, cpu measure.CPU) {
		waited := ""
		if delay > 0 {
			waited = fmt.Sprintf(" waiting %s each on average", res.WaitPerCommand().Round(time.Microsecond))
		}
		fmt.Fprintf(out, "delay %s round %d: %d ops in %.3fs = %s ops/s, %d writes in %d commands (%.1f writes/command)%s, %d getMores; CPU %.1f µs/op (%.2f cores), %.1f allocs/op; other processes %.2fs CPU\n",
			delay, r, res.Ops, res.Elapsed.Seconds(), progress.Count(int64(res.OpsPerSecond())), res.Target.Writes, res.Target.Commands, res.WritesPerCommand(), waited,
			res.Source.GetMores, float64(res.CPUPerOp().Nanoseconds())/1000, measure.Div(res.CPU.Seconds(), res.Elapsed.Seconds()), res.AllocsPerOp(), cpu.Others())
		g.rounds = append(g.rounds, res)
	}
	var err error
	if g.others, err = measure.Rounds(f.rounds, round, report); err != nil {
		return g, err
	}
	if rssReset {
		g.peakRSS = procstat.SelfPeakRSS()
	}
	return g, nil
}

// printBenchWireTable prints the medians of each shape and delay and the
// verdicts on the targets.
func printBenchWireTable(out io.Writer, f benchReplayFlags, groups []benchWireGroup) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tdelay\twriters\tops\tops/s\twrites/command\tCPU µs/op\tcores\tallocs/op\tpeak RSS\t")
	for _, g := range groups {
		rate, perCmd, cpu, cores, allocs := g.medians()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.2f\t%.0f\t%s\t\n", g.in.Shape, g.delay, f.writers, g.rounds[0].Ops,
			rate, perCmd, cpu, cores, allocs, progress.Bytes(g.peakRSS))
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "(medians of the rounds; CPU of this process, both servers included; GOMAXPROCS %d on %d CPUs; peak RSS of ferry during the rounds, the pool included)\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU())
	var others measure.Others
	for _, g := range groups {
		others.Merge(g.others)
	}
	others.Print(out)
	var verdicts []string
	for _, g := range groups {
		if g.in.Shape != replaybench.ShapeDDT || f.writers != benchWireTargetWriters {
			continue
		}
		rate, perCmd, _, _, _ := g.medians()
		switch g.delay {
		case 0:
			verdicts = append(verdicts, fmt.Sprintf("ddt, no delay: %.0f ops/s, target >= %d: %s", rate, benchWireTargetNoDelay, measure.Verdict(rate >= benchWireTargetNoDelay)))
		case time.Millisecond:
			verdicts = append(verdicts,
				fmt.Sprintf("ddt, 1ms per command: %.0f ops/s, target >= %d: %s", rate, benchWireTargetDelayed, measure.Verdict(rate >= benchWireTargetDelayed)),
				fmt.Sprintf("ddt, 1ms per command: %.1f writes/command, target >= %d: %s", perCmd, benchWireTargetPerCommand, measure.Verdict(perCmd >= benchWireTargetPerCommand)))
		}
	}
	for _, g := range groups {
		if g.delay <= 0 {
			continue
		}
		_, perCmd, _, _, _ := g.medians()
		var waits []float64
		for _, r := range g.rounds {
			waits = append(waits, r.WaitPerCommand().Seconds())
		}
		waited := time.Duration(measure.Median(waits) * float64(time.Second)).Round(time.Microsecond)
		fmt.Fprintf(out, "%s, %s per command: round trips allow at most writers x writes/command / delay = %d x %.1f / %s = %.0f ops/s (%.0f with the %s each command waited)\n",
			g.in.Shape, g.delay, f.writers, perCmd, g.delay, float64(f.writers)*perCmd/g.delay.Seconds(), float64(f.writers)*perCmd/max(waited.Seconds(), 1e-9), waited)
	}
	if len(verdicts) == 0 {
		fmt.Fprintf(out, "targets are set for the ddt shape with %d writers, with --delay 0 and 1ms\n", benchWireTargetWriters)
	}
	for _, v := range verdicts {
		fmt.Fprintln(out, v)
	}
}

// medians returns the medians of the rounds: ops/s, writes per command,
// CPU µs per op, cores busy and allocations per op.
func (g benchWireGroup) medians() (rate, perCmd, cpu, cores, allocs float64) {
	var rs, ps, cs, ks, as []float64
	for _, r := range g.rounds {
		rs, ps = append(rs, r.OpsPerSecond()), append(ps, r.WritesPerCommand())
		cs, ks = append(cs, float64(r.CPUPerOp().Nanoseconds())/1000), append(ks, measure.Div(r.CPU.Seconds(), r.Elapsed.Seconds()))
		as = append(as, r.AllocsPerOp())
	}
	return measure.Median(rs), measure.Median(ps), measure.Median(cs), measure.Median(ks), measure.Median(as)
}

// benchWireHelp is the part of `ferry bench replay --help` about --wire.
var benchWireHelp = strings.TrimSpace(`
--wire replays over the MongoDB wire protocol instead: the engine's real
tailer reads the generated oplog (the same shapes and pool) from one
in-process wiresim server with a tailable awaitData cursor, and its real
replayer writes through the Go driver to another, which counts each write
command and acknowledges it after --delay (0 by default; a list such as
0,500us,1ms runs each in turn) without storing anything. Connections go
through the engine's own opening steps (ping, distinct deployments,
buildInfo) and the replayer saves its checkpoint to the target. A round
ends when the target has acknowledged every write; it checks the counts
and that the checkpoint reached the last entry. Reported per round and as
medians: ops/s, writes per command (the batching the round trips allow),
CPU per op and cores busy (this process: the engine, the driver and both
servers), allocs/op, and the peak RSS. --ops defaults to 200000 entries
with --wire. Targets for the ddt shape with 16 writers: 300000 ops/s with
no delay, 100000 ops/s and 100 writes per command with 1ms per command.
It leaves out the servers' own work (storing documents, indexes, journal,
replication, write concern) and the network beyond loopback.`)

// benchWireExamples are the examples of `ferry bench replay --help`
// about --wire.
const benchWireExamples = `

  # Over the wire: the DDT shape, 16 writers, no delay and 1ms per write command
  ferry bench replay --wire --shape ddt --writers 16 --delay 0,1ms

  # Both shapes with 4 and 64 writers, half a millisecond per command
  ferry bench replay --wire --writers 4 --delay 500us
  ferry bench replay --wire --writers 64 --delay 500us --ops 500000

  # The same through go test
  go test ./internal/wiresim/wirebench -run '^$' -bench WireReplay -benchtime 200000x`
