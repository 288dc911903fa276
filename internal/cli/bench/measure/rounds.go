package measure

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

// Others is how much of the machine other processes used during a
// benchmark's rounds.
type Others struct {
	// Seconds is the CPU time of other processes, Capacity the CPU time
	// the machine had.
	Seconds, Capacity float64
}

// Add counts what a round's others used in elapsed.
func (o *Others) Add(cpu CPU, elapsed time.Duration) {
	o.Seconds += cpu.Others()
	o.Capacity += float64(runtime.NumCPU()) * elapsed.Seconds()
}

// Merge adds what another set of rounds counted.
func (o *Others) Merge(p Others) {
	o.Seconds, o.Capacity = o.Seconds+p.Seconds, o.Capacity+p.Capacity
}

// Share is the share of the machine's capacity the others used.
func (o Others) Share() float64 { return Div(o.Seconds, o.Capacity) }

// Print says how much of the machine other processes used and warns when
// it skews the figures.
func (o Others) Print(out io.Writer) {
	fmt.Fprintf(out, "other processes used %.0f%% of the machine's CPU capacity during the rounds\n", 100*o.Share())
	if o.Share() > NoisyShare {
		fmt.Fprintln(out, "WARNING: the machine was shared with other busy processes; the figures are skewed: run again on a quiet machine")
	}
}

// Rounds runs round(r) for r from 1 to n, each timed against the CPU
// seconds of this process and of the other processes: round returns its
// elapsed time, and report prints its line with the CPU it used. It
// returns what the others used over all rounds.
func Rounds(n int, round func(r int) (time.Duration, error), report func(r int, cpu CPU)) (Others, error) {
	var (
		others Others
		s      Sampler
	)
	for r := 1; r <= n; r++ {
		cpu0 := s.Sample()
		elapsed, err := round(r)
		if err != nil {
			return others, err
		}
		cpu := s.Sample().Sub(cpu0)
		report(r, cpu)
		others.Add(cpu, elapsed)
	}
	return others, nil
}
