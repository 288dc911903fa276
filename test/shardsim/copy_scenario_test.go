package shardsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// readShard reads every _id range of shard name to its end, filtered by
// the table read at the copy's start.
func (cp *copier) readShard(name string, tasks []*readTask) {
	for _, t := range tasks {
		for t.shard.Name == name && !t.finished {
			cp.read(t)
		}
	}
}

// TestCopyScenarioKeyChangeThroughMovingChunk is the third case of the
// argument in docs/sharded.md ("Why the copy's union is exact"): document
// X lives on s0 in chunk 0; chunk 1 migrates s1 -> s0; X changes its key
// in place into chunk 1, so s0's reader, filtering by the ownership read
// at the start (chunk 1 on s1), leaves it out; X changes its key back
// into chunk 0; chunk 1 moves on to s2. The settling pass must read s0
// again although s0 owns no changed chunk in the new table: reading only
// the new owners (s2) loses X, whose later writes are updates of a
// document the target does not have.
func TestCopyScenarioKeyChangeThroughMovingChunk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opt      CopyOptions
		wantLost bool
	}{
		{"every shard a migration went into", CopyOptions{}, false},
		{"only the new owners of the changed chunks", CopyOptions{NewOwnersOnly: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel(1, "app.users", 3, false)
			s0, s1, s2 := m.Shard("s0"), m.Shard("s1"), m.Shard("s2")
			if m.Owner(0) != s0 || m.Owner(1) != s1 {
				t.Fatalf("chunks 0 and 1 on %s and %s, want s0 and s1", m.Owner(0).Name, m.Owner(1).Name)
			}
			cp := newCopier(m, rand.New(rand.NewPCG(1, 2)), tc.opt)
			x := m.Insert(5)
			m.Insert(25)
			prev := cp.begin()
			var tasks []*readTask
			for _, s := range m.Shards {
				tasks = append(tasks, idRanges(s, m.nextID, prev)...)
			}
			cp.readShard("s1", tasks)
			cp.readShard("s2", tasks)
			cp.observe(func() { m.Migrate(1, s0, 0, false) })
			m.ChangeKeyInPlace(x.ID, 15)
			cp.readShard("s0", tasks)
			m.ChangeKeyInPlace(x.ID, 5)
			cp.observe(func() { m.Migrate(1, s2, 0, false) })
			cp.quiet = true // the passes only read
			cp.settle(prev)
			cp.land()
			sc := cp.finish(1)
			res, err := Run(context.Background(), sc, Config{Seed: 1, From: cp.cp.From, Recorder: NewCopyRecorder(m, cp.cp)})
			if err != nil {
				t.Fatal(err)
			}
			lost := slices.ContainsFunc(res.Violations, func(v string) bool { return strings.HasPrefix(v, fmt.Sprintf("_id %d missing", x.ID)) })
			t.Logf("%d settling pass(es) reading %d shard(s) again; violations: %v", cp.cp.Passes, cp.cp.Rescanned, res.Violations)
			if lost != tc.wantLost {
				t.Fatalf("document %d lost: %v, want %v (violations %v)", x.ID, lost, tc.wantLost, res.Violations)
			}
			if !tc.wantLost && len(res.Violations) > 0 {
				t.Fatalf("violations: %v", res.Violations)
			}
		})
	}
}
