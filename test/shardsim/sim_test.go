package shardsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// simSeeds is the number of schedules of the normal run; simSteps their
// length.
const (
	simSeeds = 1000
	simSteps = 14
)

// seedsFromEnv returns the seeds to run: SHARDSIM_SEED=<n> runs that one
// alone, SHARDSIM_SEEDS=<n> (make sim-long) that many from
// SHARDSIM_FIRST (default 1), otherwise def from 1.
func seedsFromEnv(t *testing.T, def int) (first uint64, n int) {
	if s := os.Getenv("SHARDSIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SHARDSIM_SEED=%q: %v", s, err)
		}
		return v, 1
	}
	first, n = 1, def
	if s := os.Getenv("SHARDSIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("SHARDSIM_SEEDS=%q: %v", s, err)
		}
		n = v
	}
	if s := os.Getenv("SHARDSIM_FIRST"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SHARDSIM_FIRST=%q: %v", s, err)
		}
		first = v
	}
	return first, n
}

// TestSim runs seeded random schedules of the cluster model (see doc.go:
// the model stands in for a sharded cluster with the balancer on) through
// one real Replayer per shard into a recording sink that checks each
// document's writes arrive in order, once, none from a fromMigrate
// entry, and that the final documents equal the model's. A failing seed
// prints the command that replays it alone.
func TestSim(t *testing.T) {
	first, n := seedsFromEnv(t, simSeeds)
	steps := simSteps
	if os.Getenv("SHARDSIM_SEEDS") != "" {
		steps = 3 * simSteps
	}
	var (
		mu     sync.Mutex
		failed []string
		stats  struct {
			migrations, aborted, keyChanges, txns, added, removed, ddl, stops, sharded int
			target                                                                     TargetStats
			commitWaits, commitWaitsAll                                                int64
			commitWaitSeconds                                                          float64
			conflicts, conflictWaits, steppedOver, reread, rechecked                   int64
			conflictWaitSeconds                                                        float64
		}
	)
	fired, firedEvents := map[string]int{}, map[string]int{}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	started := time.Now()
	for seed := first; seed < first+uint64(n); seed++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			sc := GenerateWith(seed, "app.users", steps, behavioursFromEnv(t, seed))
			tgt := simTarget(seed)
			// Every schedule with a task's default options.
			res, err := Run(context.Background(), sc, Config{Seed: seed, Kills: 2, Sharded: tgt})
			errs := res.Violations
			if tgt != nil && len(errs) > 0 {
				errs = append(errs, "target: "+tgt.Describe())
			}
			mu.Lock()
			defer mu.Unlock()
			m := sc.Model
			for name, n := range m.Fired {
				if n > 0 {
					fired[name]++
					firedEvents[name] += n
				}
			}
			stats.migrations += m.Migrations
			stats.aborted += m.Aborted
			stats.keyChanges += m.KeyChanges
			stats.txns += m.Txns
			stats.ddl += m.DDL
			if res.Stopped != "" {
				stats.stops++
			}
			if sc.Added != "" {
				stats.added++
			}
			if sc.Removed != "" {
				stats.removed++
			}
			if tgt != nil {
				stats.sharded++
				stats.target.Writes += res.Target.Writes
				stats.target.WithKey += res.Target.WithKey
				stats.target.Inserts += res.Target.Inserts
				stats.target.KeyChanges += res.Target.KeyChanges
				stats.target.Moves += res.Target.Moves
			}
			for _, h := range res.Holds {
				stats.commitWaits += h.CommitWaits
				stats.commitWaitsAll += h.CommitWaitsAll
				stats.commitWaitSeconds += h.CommitWaitSeconds
				stats.conflicts += h.Conflicts
				stats.conflictWaits += h.ConflictWaits
				stats.steppedOver += h.SteppedOver
				stats.reread += h.ConflictsReRead
				stats.rechecked += h.Rechecked
				stats.conflictWaitSeconds += h.ConflictWaitSeconds
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
			if len(errs) > 0 {
				failed = append(failed, fmt.Sprintf("seed %d failed (replay alone: cd test && %sSHARDSIM_SEED=%d go test ./shardsim -run 'TestSim$' -v):\n  %s",
					seed, behavioursEnv(), seed, strings.Join(errs, "\n  ")))
			}
		}()
	}
	wg.Wait()
	t.Logf("%d schedules in %s: %d migrations (%d aborted), %d shard-key changes, %d transactions, %d shards added, %d removed, %d topology operations (%d runs stopped at one, as they must)",
		n, time.Since(started).Round(time.Millisecond), stats.migrations, stats.aborted, stats.keyChanges, stats.txns, stats.added, stats.removed, stats.ddl, stats.stops)
	tg := stats.target
	t.Logf("%d runs onto a sharded target (versions 5.0 to 8.0, keys %v): %d writes, %d inserts (routed by their document), %d of the other %d with the whole shard key in their filter; %d shard-key changes, %d of them moving the document to another shard",
		stats.sharded, TargetShapes, tg.Writes, tg.Inserts, tg.WithKey, tg.Writes-tg.Inserts, tg.KeyChanges, tg.Moves)
	t.Logf("commit waits (each shard's last subtask): %d, %d of them for every subtask (no decision naming the participants on the board), %.1f s in all",
		stats.commitWaits, stats.commitWaitsAll, stats.commitWaitSeconds)
	t.Logf("writes that met another document with their _id (each shard's last subtask): %d, %d waits (%.1f s in all), %d stepped over, %d the source held (the other one older: removed), %d rechecks of such documents once every subtask passed the read",
		stats.conflicts, stats.conflictWaits, stats.conflictWaitSeconds, stats.steppedOver, stats.reread, stats.rechecked)
	if os.Getenv("SHARDSIM_BEHAVIOURS") != "none" {
		t.Logf("inserts logged without o2 (binaries before 5.3): in %d of %d schedules (%d inserts)", fired["NoInsertKey"], n, firedEvents["NoInsertKey"])
		t.Logf("_ids moved by a client that had not seen the delete, logged below it: in %d of %d schedules (%d moves)", fired["IDReuseBelowDelete"], n, firedEvents["IDReuseBelowDelete"])
		for _, name := range BehaviourNames {
			t.Logf("%s: in %d of %d schedules (%d events)", name, fired[name], n, firedEvents[name])
		}
		t.Logf("%d of %d schedules failed", len(failed), n)
	}
	for i, f := range failed {
		if i == 5 {
			t.Errorf("... and %d more failing seeds", len(failed)-5)
			break
		}
		t.Error(f)
	}
}

// simTarget is the target of seed's run: a replica set for one seed in
// five, otherwise a sharded cluster of three shards whose version and key
// the seed picks (every pair over 20 seeds).
func simTarget(seed uint64) *Target {
	if seed%5 == 0 {
		return nil
	}
	return &Target{Major: 5 + int(seed%4), Key: TargetShapes[(seed/4)%uint64(len(TargetShapes))], Shards: 3}
}

// behavioursFromEnv returns the behaviours of seed's schedule: every one
// (at a MongoDB version the seed picks) unless SHARDSIM_BEHAVIOURS says
// otherwise: a comma-separated list of BehaviourNames, or none for the
// model without them; SHARDSIM_WITHOUT names one to leave off.
func behavioursFromEnv(t *testing.T, seed uint64) Behaviours {
	v := os.Getenv("SHARDSIM_BEHAVIOURS")
	switch v {
	case "none":
		return Behaviours{}
	case "":
		v = "all"
	}
	all := AllBehaviours(rand.New(rand.NewPCG(seed, 0x7e55)))
	b := all
	if v != "all" {
		b = Behaviours{Version: all.Version}
		for _, name := range strings.Split(v, ",") {
			if !slices.Contains(BehaviourNames, name) {
				t.Fatalf("SHARDSIM_BEHAVIOURS=%q: no behaviour %q; use all or some of %v", v, name, BehaviourNames)
			}
			b = b.With(name)
		}
	}
	if w := os.Getenv("SHARDSIM_WITHOUT"); w != "" {
		b = b.Without(w)
	}
	return b
}

// behavioursEnv returns the SHARDSIM_ behaviour settings of this run as
// a command prefix.
func behavioursEnv() string {
	var b strings.Builder
	for _, k := range []string{"SHARDSIM_BEHAVIOURS", "SHARDSIM_WITHOUT"} {
		if v := os.Getenv(k); v != "" {
			fmt.Fprintf(&b, "%s=%s ", k, v)
		}
	}
	return b.String()
}

// TestSimRecheckSeeds runs the long schedules (make sim-long's length)
// in which an _id moved to another shard has its shard key return to an
// old value while the old shard's subtask lags: the settle writes the
// source's document under the old key, and the old shard's own delete of
// the old document, still to come, removes it. Without replay's recheck
// (pkg/engine/replay/recheck.go) each of them ends without that document.
func TestSimRecheckSeeds(t *testing.T) {
	for _, seed := range []uint64{3621, 7592, 11051, 14276, 16153, 17879, 20706} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			sc := GenerateWith(seed, "app.users", 3*simSteps, behavioursFromEnv(t, seed))
			res, err := Run(context.Background(), sc, Config{Seed: seed, Kills: 2, Sharded: simTarget(seed)})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Violations) > 0 {
				t.Fatalf("seed %d: %v", seed, res.Violations)
			}
			var rechecked int64
			for _, h := range res.Holds {
				rechecked += h.Rechecked
			}
			if rechecked == 0 {
				t.Errorf("seed %d: no recheck ran; the schedule no longer makes the case", seed)
			}
		})
	}
}
