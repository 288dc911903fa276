package shardsim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// copySeeds is the number of copy schedules of the normal run.
const copySeeds = 300

// copyRun is what one copy schedule gave.
type copyRun struct {
	seed    uint64
	cp      *CopyPhase
	errs    []string
	writes  int
	sharded bool
}

// runCopy generates seed's copy schedule and replays it from the copy's
// start positions onto the copy's documents.
func runCopy(t *testing.T, seed uint64, steps int, opt CopyOptions) copyRun {
	sc, cp := GenerateCopy(seed, "app.users", steps, behavioursFromEnv(t, seed), opt)
	rec := NewCopyRecorder(sc.Model, cp)
	tgt := simTarget(seed)
	res, err := Run(context.Background(), sc, Config{Seed: seed, Kills: 2, From: cp.From, Recorder: rec, Sharded: tgt})
	out := copyRun{seed: seed, cp: cp, errs: res.Violations, writes: len(sc.Model.Writes), sharded: tgt != nil}
	if tgt != nil && len(out.errs) > 0 {
		out.errs = append(out.errs, "target: "+tgt.Describe())
	}
	if err != nil {
		out.errs = append(out.errs, err.Error())
	}
	return out
}

// runCopies runs n copy schedules from first, eight at a time.
func runCopies(t *testing.T, first uint64, n, steps int, opt CopyOptions) []copyRun {
	out := make([]copyRun, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = runCopy(t, first+uint64(i), steps, opt)
		}()
	}
	wg.Wait()
	return out
}

// TestSimCopy runs seeded schedules with a per-shard copy (GenerateCopy:
// readers over each shard as it is, filtered by the ownership read at the
// copy's start, migrations both ways with reads between their steps,
// empty and aborted ones, range deletions, readers killed mid-range, the
// settling passes) and then one real Replayer per shard from the copy's
// start positions, onto a sharded target in four seeds of five (simTarget):
// the target must end equal to the model, every write after the start
// positions applied in order.
func TestSimCopy(t *testing.T) {
	first, n := seedsFromEnv(t, copySeeds)
	steps := simSteps
	if os.Getenv("SHARDSIM_SEEDS") != "" {
		steps = 3 * simSteps
	}
	started := time.Now()
	runs := runCopies(t, first, n, steps, CopyOptions{})
	var sum CopyPhase
	var failed []string
	writes, sharded := 0, 0
	for _, r := range runs {
		if r.sharded {
			sharded++
		}
		c := r.cp
		sum.Reads += c.Reads
		sum.Kills += c.Kills
		sum.Orphans += c.Orphans
		sum.Migrations += c.Migrations
		sum.Aborted += c.Aborted
		sum.Empty += c.Empty
		sum.RangeDeletions += c.RangeDeletions
		sum.Passes += c.Passes
		sum.Recopied += c.Recopied
		sum.Rescanned += c.Rescanned
		writes += r.writes
		if len(r.errs) > 0 {
			failed = append(failed, fmt.Sprintf("seed %d failed (alone: cd test && %sSHARDSIM_SEED=%d go test ./shardsim -run 'TestSimCopy$' -v):\n  %s",
				r.seed, behavioursEnv(), r.seed, strings.Join(r.errs, "\n  ")))
		}
	}
	t.Logf("%d copy schedules in %s: %d batches read, %d readers killed mid-range, %d orphan documents left out; during the copies %d migrations committed (%d of them empty), %d aborted, %d range deleter runs; %d settling passes (%d changed chunks) reading %d shards again; %d writes replayed after the start positions (%d runs onto a sharded target); %d of %d schedules failed",
		n, time.Since(started).Round(time.Millisecond), sum.Reads, sum.Kills, sum.Orphans, sum.Migrations, sum.Empty, sum.Aborted, sum.RangeDeletions,
		sum.Passes, sum.Recopied, sum.Rescanned, writes, sharded, len(failed), n)
	for i, f := range failed {
		if i == 5 {
			t.Errorf("... and %d more failing seeds", len(failed)-5)
			break
		}
		t.Error(f)
	}
}

// TestSimCopyNeedsEachPart runs copy schedules with one part of the rule
// left out until one ends different from the source: without the
// settling passes, a document whose chunk migrated away before its
// owner's reader reached it (and was range-deleted there) is never
// copied; without the orphan filter, an orphan copy left by a migration
// before the copy's start can land over the live one.
func TestSimCopyNeedsEachPart(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  CopyOptions
	}{
		{"without settling passes", CopyOptions{NoSettle: true}},
		{"without the orphan filter", CopyOptions{NoOrphanFilter: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad, n := 0, 0
			for n < 400 && bad == 0 { // until a schedule shows it
				for _, r := range runCopies(t, uint64(n+1), 25, simSteps, tc.opt) {
					if len(r.errs) > 0 {
						bad++
					}
				}
				n += 25
			}
			t.Logf("%d of the first %d schedules end with the target different from the source", bad, n)
			if bad == 0 {
				t.Fatal("no schedule failed: the model does not show what this part of the rule prevents")
			}
		})
	}
}
