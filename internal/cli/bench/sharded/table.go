package sharded

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// procCPU is CPU seconds (user+system) of ferry, of each FerretDB process
// of the bed and of the whole machine.
type procCPU struct {
	ferry, router, target, machine float64
	shards                         []float64
}

// sample reads the CPU seconds used so far.
func (b *bed) sample() procCPU {
	c := measure.Sampler{}.Sample()
	p := procCPU{ferry: c.Ferry, machine: c.Machine,
		router: measure.ProcessCPU(b.c.Router.Pid()), target: measure.ProcessCPU(b.dst.Pid())}
	for _, s := range b.c.Shards {
		p.shards = append(p.shards, measure.ProcessCPU(s.Pid()))
	}
	return p
}

// sub is the CPU used between o and p.
func (p procCPU) sub(o procCPU) procCPU {
	d := procCPU{ferry: p.ferry - o.ferry, router: p.router - o.router, target: p.target - o.target, machine: p.machine - o.machine}
	for i := range p.shards {
		d.shards = append(d.shards, p.shards[i]-o.shards[i])
	}
	return d
}

func (p procCPU) shardSum() float64 {
	var s float64
	for _, x := range p.shards {
		s += x
	}
	return s
}

// ours is the CPU of ferry and of every server of the bed.
func (p procCPU) ours() float64 { return p.ferry + p.router + p.target + p.shardSum() }

// perDoc is CPU seconds per copied document, in microseconds.
func (r copyRun) perDoc(seconds float64) float64 { return 1e6 * measure.Div(seconds, float64(r.docs)) }

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func progressBytes(n int64) string { return progress.Bytes(n) }

// printRuns prints every copy: its time and rate, and the CPU per copied
// document of each process.
func printRuns(out io.Writer, runs []copyRun) {
	fmt.Fprintln(out, "Copies (copy s: the engine's Status().Copy.ElapsedSeconds, planning and passes included; CPU in µs per copied document, user+system)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shards\tmode\tround\tdocs\tcopy s\tplanning s\tdocs/s\tto streaming s\tferry\tshards\trouter\ttarget\tall ours\tCPU-s per shard\tothers CPU-s\t")
	for _, r := range runs {
		per := make([]string, len(r.cpu.shards))
		for i, s := range r.cpu.shards {
			per[i] = fmt.Sprintf("%.1f", s)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.2f\t%.2f\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%.1f\t\n", r.shards, r.mode, r.round, r.docs, r.seconds, r.planning, r.rate(), r.streaming,
			r.perDoc(r.cpu.ferry), r.perDoc(r.cpu.shardSum()), r.perDoc(r.cpu.router), r.perDoc(r.cpu.target), r.perDoc(r.cpu.ours()),
			strings.Join(per, "/"), max(r.cpu.machine-r.cpu.ours(), 0))
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\nCommands served during each copy (router; shards summed): find and getMore read documents, the others are the copy's bookkeeping")
	for _, r := range runs {
		fmt.Fprintf(out, "  %d shard(s) %-8s round %d: router %s; shards %s\n", r.shards, r.mode, r.round, formatCommands(r.routerCmds), formatCommands(r.shardCmds))
	}
}

// formatCommands writes counters as "find 3, getMore 60", sorted by name.
func formatCommands(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// printGrowth prints, per shard count, the median copy time of each mode
// and their ratio: the side-by-side verdict, and how it grows from 1 to
// N shards.
func printGrowth(out io.Writer, counts []int, runs []copyRun) {
	fmt.Fprintln(out, "\nSide by side (medians over the rounds; copying s: copy s less planning)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shards\tperShard s\tperShard docs/s\trouter s\trouter docs/s\trouter s / perShard s\tcopying s perShard\tcopying s router\tferry µs/doc perShard\tferry µs/doc router\tservers µs/doc perShard\tservers µs/doc router\t")
	for _, n := range counts {
		ps, rt := medians(runs, n, config.ShardedCopyPerShard), medians(runs, n, config.ShardedCopyRouter)
		fmt.Fprintf(tw, "%d\t%.2f\t%.0f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", n, ps.seconds, ps.rate, rt.seconds, rt.rate,
			measure.Div(rt.seconds, ps.seconds), ps.copying, rt.copying, ps.ferry, rt.ferry, ps.servers, rt.servers)
	}
	_ = tw.Flush()
	for _, n := range counts {
		ps, rt := medians(runs, n, config.ShardedCopyPerShard), medians(runs, n, config.ShardedCopyRouter)
		verdict := "per-shard copy FASTER than through mongos"
		if ps.seconds >= rt.seconds {
			verdict = "per-shard copy NOT faster than through mongos"
		}
		fmt.Fprintf(out, "%d shard(s): %s (%.2fs against %.2fs)\n", n, verdict, ps.seconds, rt.seconds)
	}
}

// median is one mode's medians at one shard count.
type median struct{ seconds, copying, rate, ferry, servers float64 }

func medians(runs []copyRun, n int, mode config.ShardedCopy) median {
	var secs, copying, rates, ferry, servers []float64
	for _, r := range runs {
		if r.shards != n || r.mode != mode {
			continue
		}
		secs, copying, rates = append(secs, r.seconds), append(copying, r.seconds-r.planning), append(rates, r.rate())
		ferry, servers = append(ferry, r.perDoc(r.cpu.ferry)), append(servers, r.perDoc(r.cpu.ours()-r.cpu.ferry))
	}
	if len(secs) == 0 {
		return median{}
	}
	return median{seconds: measure.Median(secs), copying: measure.Median(copying), rate: measure.Median(rates), ferry: measure.Median(ferry), servers: measure.Median(servers)}
}
