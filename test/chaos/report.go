package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Report holds a run's figures.
type Report struct {
	mu sync.Mutex

	Seed   uint64
	Cycles int
	// Completed counts the cycles that ran to their comparison.
	Completed int
	// Epochs counts tasks started (each on a new database).
	Epochs int
	// Faults counts faults injected by kind; a worker kill meant for one
	// starting stage is counted under the stage the worker reported just
	// before the kill.
	Faults map[Kind]int
	// Comparisons counts settled comparisons, Compared the source
	// documents they compared, Differences what they found.
	Comparisons, Compared, Differences int
	Examples                           []string
	// Wedges counts test servers the watchdog found wedged and restarted.
	Wedges map[string]int
	// Exits counts worker exits on their own, by exit code.
	Exits map[int]int
	// Repaired counts documents written again after a failed write.
	Repaired int
	// PeakRSS is the highest worker RSS seen.
	PeakRSS int64
	// Recovery is, per settle, the time from the end of the fault to the
	// task having applied everything the source wrote.
	Recovery []time.Duration
	// WindowLostStops is, per OplogWindowLost fault, how long the worker
	// took to stop.
	WindowLostStops []time.Duration
	Elapsed         time.Duration
	LoadOps         int64
	LoadErrors      int64
	// ShapeSteps counts the shapes writer's steps by shape (shapes.go),
	// ShapesAbandoned those whose ts values came too late to be used;
	// KillShapes the steps written in the cycles of worker kills, from
	// the cycle's start to its comparison.
	ShapeSteps      map[string]int64
	ShapesAbandoned int64
	KillShapes      map[string]int64
}

func newReport(cfg Config) *Report {
	return &Report{Seed: cfg.Seed, Cycles: cfg.Cycles, Faults: map[Kind]int{}, Wedges: map[string]int{}, Exits: map[int]int{}}
}

func (r *Report) addFault(k Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Faults[k]++
}

// addKill counts a starting-stage kill under the stage seen.
func (r *Report) addKill(planned Kind, seen string) {
	k := map[string]Kind{"planning": KillPlanning, "copying": KillCopy, "indexes": KillIndexes, "replay": KillReplay}[seen]
	if k == "" {
		k = planned
	}
	r.addFault(k)
}

func (r *Report) addWedge(server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Wedges[server]++
}

func (r *Report) wedges() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.Wedges {
		n += v
	}
	return n
}

func (r *Report) addExit(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Exits[code]++
}

func (r *Report) addWorker(w *Worker) {
	if w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.PeakRSS = max(r.PeakRSS, w.PeakRSS())
}

func (r *Report) addLoad(l *Load) {
	ops, errs := l.Counts()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.LoadOps += ops
	r.LoadErrors += errs
	steps, abandoned := l.ShapeSteps()
	if r.ShapeSteps == nil {
		r.ShapeSteps = map[string]int64{}
	}
	for k, v := range steps {
		r.ShapeSteps[k] += v
	}
	r.ShapesAbandoned += abandoned
}

// addKillShapes counts the shapes steps of a kill's cycle: after less
// before (nil when the cycle began a new epoch).
func (r *Report) addKillShapes(after, before map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.KillShapes == nil {
		r.KillShapes = map[string]int64{}
	}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			r.KillShapes[k] += d
		}
	}
}

func (r *Report) addDiff(db string, d Diff) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Comparisons++
	r.Compared += d.Compared
	r.Differences += d.Differences()
	for _, e := range d.Examples {
		if len(r.Examples) < 20 {
			r.Examples = append(r.Examples, db+": "+e)
		}
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// Write prints the figures.
func (r *Report) Write(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "chaos run: seed %d, %d of %d cycles, %d tasks (epochs), %s\n", r.Seed, r.Completed, r.Cycles, r.Epochs, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "faults injected by kind:\n")
	for _, k := range Kinds {
		fmt.Fprintf(w, "  %-46s %5d\n", k, r.Faults[k])
	}
	fmt.Fprintf(w, "comparisons: %d, documents compared: %d, differences: %d\n", r.Comparisons, r.Compared, r.Differences)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
	fmt.Fprintf(w, "recovery (fault healed to caught up): median %s, p95 %s, max %s over %d settles\n",
		percentile(r.Recovery, 0.5).Round(10*time.Millisecond), percentile(r.Recovery, 0.95).Round(10*time.Millisecond),
		percentile(r.Recovery, 1).Round(10*time.Millisecond), len(r.Recovery))
	if len(r.WindowLostStops) > 0 {
		fmt.Fprintf(w, "OplogWindowLost: the worker stopped with exit code 3 within median %s, max %s (a changed target counts as a difference above)\n",
			percentile(r.WindowLostStops, 0.5).Round(10*time.Millisecond), percentile(r.WindowLostStops, 1).Round(10*time.Millisecond))
	}
	fmt.Fprintf(w, "worker peak RSS: %d MiB\n", r.PeakRSS>>20)
	fmt.Fprintf(w, "worker exits on its own (restarted): %s\n", countsString(r.Exits))
	fmt.Fprintf(w, "wedged test servers (restarted by the watchdog): %s\n", countsString(r.Wedges))
	fmt.Fprintf(w, "workload: %d writes, %d failed, %d documents written again after a failed write\n", r.LoadOps, r.LoadErrors, r.Repaired)
	fmt.Fprintf(w, "entries of other shapes (shapes writer; all / in the cycles of worker kills):\n")
	var all, kills int64
	for _, k := range ShapeKinds {
		fmt.Fprintf(w, "  %-46s %5d %5d\n", k, r.ShapeSteps[k], r.KillShapes[k])
		all, kills = all+r.ShapeSteps[k], kills+r.KillShapes[k]
	}
	fmt.Fprintf(w, "  %-46s %5d %5d\n", "total", all, kills)
	fmt.Fprintf(w, "  steps abandoned (their ts values came too late): %d\n", r.ShapesAbandoned)
}

func countsString[K comparable](m map[K]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%v: %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
