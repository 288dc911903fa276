package full

import (
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
)

// printBenchFullTable prints each round, the medians and the verdicts;
// peakRSS is the process's peak over the whole run.
func printBenchFullTable(out io.Writer, rounds []benchRound, peakRSS int64) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tbaseline docs/s\traw copy docs/s\tcopy docs/s\tcopy s\tplanning s\tcopying s\tcopying docs/s\twall s\tcopy/baseline\tcopy/raw copy\t")
	var base, raw, cp, copying []float64
	for i, r := range rounds {
		c := r.copy
		cr := measure.Div(float64(c.docs), c.copying)
		base, raw, cp, copying = append(base, r.baseline.rate()), append(raw, r.rawCopy.rate()), append(cp, c.rate()), append(copying, cr)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f\t%.2f\t%.3f\t%.3f\t\n", i+1, r.baseline.rate(), r.rawCopy.rate(),
			c.rate(), c.seconds, c.planning, c.copying, cr, c.wall, measure.Div(c.rate(), r.baseline.rate()), measure.Div(c.rate(), r.rawCopy.rate()))
	}
	ratio, rawRatio := measure.Div(measure.Median(cp), measure.Median(base)), measure.Div(measure.Median(cp), measure.Median(raw))
	fmt.Fprintf(tw, "median\t%.0f\t%.0f\t%.0f\t\t\t\t%.0f\t\t%.3f\t%.3f\t\n", measure.Median(base), measure.Median(raw), measure.Median(cp), measure.Median(copying), ratio, rawRatio)
	_ = tw.Flush()

	fmt.Fprintln(out, "\nCPU seconds per phase (user+system)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tphase\tseconds\tferry\tsource\ttarget\tours\tours per 1k docs\tother processes\t")
	for i, r := range rounds {
		for _, p := range []struct {
			name string
			p    benchPhase
		}{{"baseline", r.baseline}, {"raw copy", r.rawCopy}, {"copy", r.copy.benchPhase}} {
			c := p.p.cpu
			fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.2f\t\n", i+1, p.name, p.p.seconds, c.Ferry, c.Source, c.Target,
				c.Ours(), 1000*measure.Div(c.Ours(), float64(p.p.docs)), c.Others())
		}
	}
	_ = tw.Flush()
	var others, capacity float64
	for _, r := range rounds {
		others += r.baseline.cpu.Others() + r.rawCopy.cpu.Others() + r.copy.cpu.Others()
		capacity += float64(runtime.NumCPU()) * (r.baseline.seconds + r.rawCopy.seconds + r.copy.wall)
	}
	fmt.Fprintf(out, "(%d CPUs; other processes: CPU time of everything else on the machine, %.0f%% of its capacity)\n", runtime.NumCPU(), 100*measure.Div(others, capacity))
	if measure.Div(others, capacity) > measure.NoisyShare {
		fmt.Fprintln(out, "WARNING: the machine was shared with other busy processes; the figures are skewed: run again on a quiet machine (or under nice -n -15)")
	}

	var peakBuf, peakCopy int64
	for _, r := range rounds {
		peakBuf, peakCopy = max(peakBuf, r.copy.peakBuffered), max(peakCopy, r.copy.peakRSS)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "peak RSS of ferry: %s over the whole run (it holds each baseline's documents)", progress.Bytes(peakRSS))
	if peakCopy > 0 {
		fmt.Fprintf(out, ", %s during the copy rounds", progress.Bytes(peakCopy))
	}
	fmt.Fprintf(out, "; copy peak buffered %s\n", progress.Bytes(peakBuf))
	verdict := "PASS"
	if ratio < benchTargetRatio {
		verdict = "BELOW TARGET"
	}
	fmt.Fprintf(out, "copy/baseline (medians): %.3f  target >= %.2f: %s\n", ratio, benchTargetRatio, verdict)
	fmt.Fprintf(out, "copy/raw copy (medians): %.3f  (the engine against one find cursor feeding the same insertMany batches)\n", rawRatio)
}
