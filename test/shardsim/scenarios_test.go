package shardsim

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
)

// lastFromMigrate returns the ts of s's last fromMigrate entry.
func lastFromMigrate(s *Shard) bson.Timestamp {
	var ts bson.Timestamp
	for _, e := range s.Log {
		if v, err := e.LookupErr("fromMigrate"); err == nil && v.Boolean() {
			ts = tsOf(e)
		}
	}
	return ts
}

// mustRun runs a scenario's schedule and fails on any violation.
func mustRun(t *testing.T, sc Schedule, cfg Config) Result {
	t.Helper()
	res, err := Run(context.Background(), sc, cfg)
	if err != nil {
		t.Fatalf("run: %v (violations: %v)", err, res.Violations)
	}
	for _, v := range res.Violations {
		t.Error(v)
	}
	return res
}

// TestScenario8MigrationWithRecipientAhead is correctness scenario 8 of
// docs/architecture.md, on the model (two shards stand in for a donor and a
// recipient; their oplogs are the ones mongod writes around a chunk
// migration): X is updated on the donor before the migration and on the
// recipient after it, and the recipient's reader is far ahead of the
// donor's: the target holds the recipient's version. Y is deleted on the
// donor and inserted again on the recipient: it exists. The donor's range
// deleter (fromMigrate deletes) deletes nothing on the target.
func TestScenario8MigrationWithRecipientAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kills int
	}{{"no restarts", 0}, {"subtasks killed and restarted", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel(8, "app.users", 2, false)
			donor, recipient := m.Owner(0), m.Owner(1)
			x := m.Insert(3)
			y := m.Insert(4)
			m.Update(x.ID)
			m.Delete(y.ID)
			m.Migrate(0, recipient, 0, false)
			m.Update(x.ID)
			m.InsertID(y.ID, 5)
			m.Update(x.ID)
			m.RangeDelete(donor)
			m.Finish()
			tm := lastFromMigrate(recipient)
			rec := NewRecorder(m)
			cfg := Config{Seed: 8, Kills: tc.kills, Recorder: rec,
				Speeds: map[string]int{donor.Name: 0, recipient.Name: 1000},
				Step: func(_ int, b *board.MemoryBoard, rec *Recorder) bool {
					ps, _ := b.Positions(context.Background())
					for _, p := range ps {
						if p.Shard == donor.Name && p.Applied.Before(board.Prev(tm)) && rec.AppliedFrom(recipient.Name, tm) > 0 {
							t.Errorf("a recipient write after the migration (ts >= %v) reached the target while the donor had applied only up to %v", tm, p.Applied)
							return false
						}
					}
					return true
				}}
			res := mustRun(t, Schedule{Seed: 8, Model: m}, cfg)
			got := rec.Docs()
			if d := got[x.ID]; d != m.Docs[x.ID] || d.V != 4 {
				t.Errorf("X is %+v on the target, want the recipient's last version %+v", d, m.Docs[x.ID])
			}
			if _, ok := got[y.ID]; !ok {
				t.Errorf("Y (deleted on the donor, inserted again on the recipient) is missing on the target")
			}
			if h := res.Holds[recipient.Name]; h.HeldWrites == 0 {
				t.Errorf("the recipient held no write (%+v): the donor was far behind, it had to", h)
			}
		})
	}
}

// TestScenario9IdleShard is scenario 9: a third shard is idle (it writes
// only periodic no-ops, and its reader is the slowest). The recipient of a
// migration between the two others releases nothing past the migration
// before the idle shard's position passes it, and the idle shard's
// checkpoint advances with its no-ops.
func TestScenario9IdleShard(t *testing.T) {
	m := NewModel(9, "app.users", 3, true)
	idle := m.Shards[2]
	donor, recipient := m.Owner(0), m.Owner(1)
	x := m.Insert(2)
	for range 3 {
		m.Noop(idle)
	}
	m.Migrate(0, recipient, 0, false)
	for range 3 {
		m.Update(x.ID)
		m.Noop(idle)
	}
	m.RangeDelete(donor)
	m.Finish()
	tm := lastFromMigrate(recipient)
	released := false
	rec := NewRecorder(m)
	cfg := Config{Seed: 9, Recorder: rec,
		Speeds: map[string]int{donor.Name: 1000, recipient.Name: 1000, idle.Name: 0},
		Step: func(_ int, b *board.MemoryBoard, rec *Recorder) bool {
			ps, _ := b.Positions(context.Background())
			for _, p := range ps {
				if p.Shard != idle.Name {
					continue
				}
				early := rec.AppliedFrom(recipient.Name, tm) > 0
				if early && !p.Reaches(tm, bson.Timestamp{}) {
					t.Errorf("a recipient write past the migration (ts >= %v) reached the target while the idle shard was at %v", tm, p.Applied)
					return false
				}
				released = released || early
			}
			return true
		}}
	res := mustRun(t, Schedule{Seed: 9, Model: m}, cfg)
	if !released {
		t.Error("the recipient's writes were never released")
	}
	if h := res.Holds[recipient.Name]; h.HeldWrites == 0 {
		t.Errorf("the recipient held no write (%+v)", h)
	}
	if got := rec.Docs()[x.ID]; got != m.Docs[x.ID] {
		t.Errorf("X is %+v, want %+v", got, m.Docs[x.ID])
	}
}

// TestScenario10ShardKeyChange is scenario 10: a shard-key change moves X
// from one shard to another in one prepared transaction (a delete with
// the old key on the first, an insert with the new key on the second,
// commitTransaction with one commitTimestamp on both). Whichever subtask
// runs ahead, the target ends with exactly one X, with the new key, and
// an update of X on the old shard just before never lands over it.
func TestScenario10ShardKeyChange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		oldFast    bool
		kills      int
		updateLast bool
	}{
		{name: "delete applied first", oldFast: true},
		{name: "insert applied first", oldFast: false},
		{name: "insert first, then updated on the new shard", oldFast: false, updateLast: true},
		{name: "subtasks killed and restarted", oldFast: false, kills: 2, updateLast: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel(10, "app.users", 2, false)
			from, to := m.Owner(0), m.Owner(1)
			x := m.Insert(1)
			other := m.Insert(15)
			m.Update(x.ID)
			if !m.ChangeKey(x.ID, 17, func() { m.Update(other.ID) }) {
				t.Fatal("chunks 0 and 1 have the same owner")
			}
			if tc.updateLast {
				m.Update(x.ID)
			}
			m.Finish()
			speeds := map[string]int{from.Name: 1000, to.Name: 0}
			if !tc.oldFast {
				speeds = map[string]int{from.Name: 0, to.Name: 1000}
			}
			rec := NewRecorder(m)
			mustRun(t, Schedule{Seed: 10, Model: m}, Config{Seed: 10, Kills: tc.kills, Speeds: speeds, Recorder: rec})
			got := rec.Docs()[x.ID]
			if want := m.Docs[x.ID]; got != want || got.SK != 17 {
				t.Errorf("X is %+v on the target, want %+v", got, want)
			}
		})
	}
}

// TestScenarioMigrationDuringShardKeyChange: a shard-key change moves X
// from s0 to s1 and, between its prepares and its commits, a chunk
// migrates into s2. s1's part inserts X, so it waits for s2 to reach the
// commit; s2 holds the migrated namespace until s1 reaches the migration.
// s1's checkpoint passes its prepare while it waits (the part's entries
// are saved with it), so both go on; with kills, restarts recover the
// saved part.
func TestScenarioMigrationDuringShardKeyChange(t *testing.T) {
	for _, kills := range []int{0, 3} {
		m := NewModel(11, "app.users", 3, false)
		x, y := m.Insert(1), m.Insert(3)
		m.ChangeKey(x.ID, 15, func() { m.Migrate(0, m.Owner(2), 0, false); m.Update(y.ID) })
		m.Update(y.ID)
		m.Finish()
		mustRun(t, Schedule{Seed: 11, Model: m}, Config{Seed: 11, Kills: kills, Speeds: map[string]int{"s0": 1000, "s1": 1000, "s2": 1000}})
	}
}

// TestScenario10OnShardedTarget is scenario 10 onto a sharded target
// (the Target model: a mongos's routing rules and the task's pre-split),
// for every target version and key shape: the shard-key change's two
// halves in either order, then a change within one source shard (an
// update of sk) that moves X to another target shard. Every update, replacement and delete carries the target's whole
// shard key, none is refused, and the target ends with one X, with the
// last key.
func TestScenario10OnShardedTarget(t *testing.T) {
	for _, major := range []int{5, 6, 7, 8} {
		for _, key := range TargetShapes {
			for _, oldFast := range []bool{true, false} {
				m := NewModel(10, "app.users", 2, false)
				from, to := m.Owner(0), m.Owner(1)
				x := m.Insert(1)
				other := m.Insert(15)
				m.Update(x.ID)
				if !m.ChangeKey(x.ID, 17, func() { m.Update(other.ID) }) {
					t.Fatal("chunks 0 and 1 have the same owner")
				}
				// 35 is in chunk 3, on the same source shard as chunk 1
				// (17) and on another target shard when the target is
				// pre-split like the source.
				if m.Owner(3) != m.Owner(1) {
					t.Fatal("chunks 1 and 3 have different owners")
				}
				m.ChangeKeyInPlace(x.ID, 35)
				m.Update(x.ID)
				m.Finish()
				speeds := map[string]int{from.Name: 1000, to.Name: 0}
				if !oldFast {
					speeds = map[string]int{from.Name: 0, to.Name: 1000}
				}
				rec := NewRecorder(m)
				tgt := &Target{Major: major, Key: key, Shards: 3}
				res := mustRun(t, Schedule{Seed: 10, Model: m}, Config{Seed: 10, Speeds: speeds, Recorder: rec, Sharded: tgt})
				if got, want := rec.Docs()[x.ID], m.Docs[x.ID]; got != want || got.SK != 35 {
					t.Errorf("%s, delete first %v: X is %+v on the target, want %+v", tgt.Describe(), oldFast, got, want)
				}
				st := res.Target
				if st.Refused > 0 || st.WithKey != st.Writes-st.Inserts {
					t.Errorf("%s: %+v", tgt.Describe(), st)
				}
				if key[0].Name == "sk" && st.KeyChanges == 0 || key.Equal(TargetShapes[0]) && st.Moves == 0 {
					t.Errorf("%s: the shard-key change did not reach the target as one: %+v", tgt.Describe(), st)
				}
				t.Logf("%s, delete first %v: %+v", tgt.Describe(), oldFast, st)
			}
		}
	}
}
