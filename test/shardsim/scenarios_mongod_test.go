// The scenarios of this file are what MongoDB legally writes during chunk
// migrations and two-phase commits and what the first replay rule (hold a
// namespace's writes after the recipient's fromMigrate entries until the
// other subtasks pass them) did not survive: empty migrations, deletes of
// documents not yet cloned, checkpoints inside prepared transactions,
// commit waits that could form a cycle, writes applied again after a
// restart, _id reuse across shards. The rule of docs/sharded.md passes
// them; each comment gives its interleaving.

package shardsim

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// slowFast returns the speeds with slow's reader far behind and the
// others far ahead.
func slowFast(m *Model, slow *Shard) map[string]int {
	out := map[string]int{}
	for _, s := range m.Shards {
		out[s.Name] = 1000
	}
	out[slow.Name] = 0
	return out
}

// firstTS returns the ts of d's first write on s.
func (d Doc) firstTS(m *Model, s *Shard) bson.Timestamp {
	var first bson.Timestamp
	for _, w := range m.Writes {
		if w.ID == d.ID && w.Shard == s.Name && (first.IsZero() || w.TS.Before(first)) {
			first = w.TS
		}
	}
	return first
}

// wantDoc fails unless the target's document id equals the model's.
func wantDoc(t *testing.T, rec *Recorder, m *Model, id int64) {
	t.Helper()
	got, ok := rec.Docs()[id]
	want, exists := m.Docs[id]
	switch {
	case exists && !ok:
		t.Errorf("_id %d is missing on the target, want %+v", id, want)
	case exists && got != want:
		t.Errorf("_id %d is %+v on the target, want %+v", id, got, want)
	case !exists && ok:
		t.Errorf("_id %d is %+v on the target, want no document", id, got)
	}
}

// TestScenarioEmptyMigration: the donor deletes X (a plain delete: no
// session migrates it), the chunk, now empty, migrates and the recipient
// clones nothing, so it logs no fromMigrate CRUD entry (only, from 4.4,
// its config.rangeDeletions task and, from 6.0, its recovery document and
// critical section). The application inserts X again on the recipient and
// updates it. The donor's reader is far behind: whatever it applies last,
// X must be on the target with the recipient's version, at every version.
func TestScenarioEmptyMigration(t *testing.T) {
	for _, v := range versions {
		for _, cfgDocs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d config documents %v", v, cfgDocs), func(t *testing.T) {
				m := NewModel(21, "app.users", 2, false).With(Behaviours{Version: v, ConfigDocs: cfgDocs})
				donor, recipient := m.Owner(0), m.Owner(1)
				x := m.Insert(3)
				m.Update(x.ID)
				m.Delete(x.ID)
				m.Migrate(0, recipient, 0, false)
				m.InsertID(x.ID, 5)
				m.Update(x.ID)
				m.Finish()
				rec := NewRecorder(m)
				mustRun(t, Schedule{Seed: 21, Model: m}, Config{Seed: 21, Recorder: rec, Speeds: slowFast(m, donor)})
				wantDoc(t, rec, m, x.ID)
			})
		}
	}
}

// TestScenarioDeleteBeforeClone: the clone of chunk 0 takes the record
// ids of A and X at its start and copies A; the donor then updates B (in
// another chunk) and deletes X,
// whose batch comes next and skips it (migration_chunk_cloner_source.cpp:
// the record is gone), and the transferred delete logs nothing on a
// recipient that never had X (_applyMigrateOp). The recipient's last
// fromMigrate entry, A's copy, precedes the donor's delete. After the
// commit the application inserts X again (same shard key) on the
// recipient: with the donor's reader far behind (its update of B takes it
// past A's copy before its delete of X), X must stay on the target.
func TestScenarioDeleteBeforeClone(t *testing.T) {
	for _, kills := range []int{0, 2} {
		t.Run(fmt.Sprintf("kills %d", kills), func(t *testing.T) {
			m := NewModel(22, "app.users", 2, false).With(Behaviours{Version: 70, ConfigDocs: true, RecordIDClone: true})
			donor, recipient := m.Owner(0), m.Owner(1)
			a := m.Insert(1)
			x := m.Insert(2)
			b := m.Insert(23) // chunk 2, on the donor
			g := m.StartMigration(0, recipient)
			g.Clone(1)
			m.Update(b.ID)
			g.DonorDelete(x.ID)
			g.Clone(1)
			g.Commit()
			del := donor.Last()
			for _, w := range m.Writes {
				if w.ID == x.ID && w.Kind == 'd' {
					del = w.TS
				}
			}
			if last := lastFromMigrate(recipient); !last.Before(del) {
				t.Fatalf("the recipient's last fromMigrate entry %v does not precede the donor's delete of X at %v", last, del)
			}
			m.InsertID(x.ID, x.SK)
			m.Update(x.ID)
			m.Update(a.ID)
			m.Update(b.ID)
			m.Finish()
			rec := NewRecorder(m)
			mustRun(t, Schedule{Seed: 22, Model: m}, Config{Seed: 22, Kills: kills, Recorder: rec, Speeds: slowFast(m, donor)})
			wantDoc(t, rec, m, x.ID)
			wantDoc(t, rec, m, a.ID)
		})
	}
}

// TestScenarioCheckpointInsidePreparedTxn: a transaction updates Y on s1
// and Z on s0 and is prepared on both; before its commits, chunk 2 (W)
// migrates from s0 to s1, so s1 logs W's fromMigrate copy between its
// prepare and its commit, then W is updated on s1. s0's reader is far
// behind: s1 holds at the copy, and its checkpoint stays between the
// prepare and the commit while it does. s1 is killed there, more than
// once: each restart must recover the prepared part from what was saved
// with the checkpoint and go on.
func TestScenarioCheckpointInsidePreparedTxn(t *testing.T) {
	m := NewModel(23, "app.users", 2, false).With(Behaviours{Version: 60, ConfigDocs: true, Coordinator: true})
	s0, s1 := m.Owner(0), m.Owner(1)
	z := m.Insert(3)
	y := m.Insert(15)
	w := m.Insert(22)
	txn := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: y.ID}, TxnWrite{Kind: 'u', ID: z.ID}))
	prep := txn.Prepare(s1)
	txn.Prepare(s0)
	m.Migrate(2, s1, 0, false)
	m.Update(w.ID)
	commit := txn.Commit(s1)
	txn.Commit(s0)
	txn.End()
	m.Update(y.ID)
	m.Finish()
	rec := NewRecorder(m)
	kills := map[int]bool{15: true, 40: true, 70: true}
	mustRun(t, Schedule{Seed: 23, Model: m}, Config{Seed: 23, Recorder: rec, Speeds: slowFast(m, s0), Timeout: 10 * time.Second,
		Kill: func(round int) string {
			if kills[round] {
				return s1.Name
			}
			return ""
		}})
	for _, id := range []int64{y.ID, z.ID, w.ID} {
		wantDoc(t, rec, m, id)
	}
	inside := false
	for _, st := range rec.starts[s1.Name] {
		inside = inside || !st.from.Before(prep) && st.from.Before(commit)
	}
	// A rule that keeps the checkpoint below the prepare while it holds
	// is right too; the log says which interleaving ran.
	t.Logf("restarts of %s from between its prepare (%v) and its commit (%v): %v (%+v)", s1.Name, prep, commit, inside, rec.starts[s1.Name])
}

// TestScenarioPreparedTxnAcrossMigration: on s1 a transaction is
// prepared, then s1's range deleter deletes the orphans of a chunk that
// left it and s1 receives chunk 2 from s2 (clone entries), then the
// transaction commits on s1 and on s0. The run must finish: neither s1's
// subtask (whose transaction writes come after those migration entries)
// nor s0's (at the same commit, waiting for s1) may wait for the other for
// good.
func TestScenarioPreparedTxnAcrossMigration(t *testing.T) {
	m := NewModel(24, "app.users", 3, false).With(Behaviours{Version: 70, ConfigDocs: true, Coordinator: true})
	s0, s1, s2 := m.Owner(0), m.Owner(1), m.Owner(2)
	o := m.Insert(12) // chunk 1, s1: migrated to s0, its orphan left on s1
	a := m.Insert(43) // chunk 4, s1
	b := m.Insert(5)  // chunk 0, s0
	c := m.Insert(25) // chunk 2, s2
	m.Migrate(1, s0, 0, false)
	txn := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: a.ID}, TxnWrite{Kind: 'i', ID: 100, SK: 44},
		TxnWrite{Kind: 'u', ID: b.ID}, TxnWrite{Kind: 'i', ID: 101, SK: 6}))
	txn.Prepare(s1)
	txn.Prepare(s0)
	m.RangeDelete(s1)
	m.Migrate(2, s1, 0, false)
	txn.Commit(s1)
	txn.Commit(s0)
	txn.End()
	m.Update(c.ID)
	m.Update(o.ID)
	m.Finish()
	for _, sp := range []map[string]int{nil, slowFast(m, s2), slowFast(m, s0)} {
		rec := NewRecorder(m)
		mustRun(t, Schedule{Seed: 24, Model: m}, Config{Seed: 24, Recorder: rec, Speeds: sp})
		for _, id := range []int64{a.ID, b.ID, c.ID, o.ID, 100, 101} {
			wantDoc(t, rec, m, id)
		}
	}
}

// TestScenarioCommitWaitCycle: no migration. T1 has parts on s0 and s2,
// T2 on s1 and s2, each part inserting a document and updating one. Prepares: T1 on s0, T2 on s1, T1 on s2 (T1's
// commitTimestamp), T2 on s2 (T2's); then the commits, T1's first. s0
// reaches T1's commit while s1 is still inside T2 (prepared, uncommitted)
// and s1 reaches T2's commit while s0 is inside T1. The run must finish
// with both transactions applied, whichever reader is ahead.
func TestScenarioCommitWaitCycle(t *testing.T) {
	m := NewModel(25, "app.users", 3, false).With(Behaviours{Version: 80, Coordinator: true})
	s0, s1, s2 := m.Owner(0), m.Owner(1), m.Owner(2)
	a, b := m.Insert(2), m.Insert(12)
	c, d := m.Insert(22), m.Insert(24)
	t1 := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: a.ID}, TxnWrite{Kind: 'i', ID: 100, SK: 3},
		TxnWrite{Kind: 'u', ID: c.ID}, TxnWrite{Kind: 'i', ID: 101, SK: 23}))
	t2 := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: b.ID}, TxnWrite{Kind: 'i', ID: 102, SK: 13},
		TxnWrite{Kind: 'u', ID: d.ID}, TxnWrite{Kind: 'i', ID: 103, SK: 25}))
	t1.Prepare(s0)
	t2.Prepare(s1)
	t1.Prepare(s2)
	t2.Prepare(s2)
	t1.Commit(s0)
	t1.Commit(s2)
	t2.Commit(s1)
	t2.Commit(s2)
	t1.End()
	t2.End()
	m.Finish()
	for _, sp := range []map[string]int{nil, slowFast(m, s2), {s0.Name: 1, s1.Name: 1, s2.Name: 1}} {
		rec := NewRecorder(m)
		mustRun(t, Schedule{Seed: 25, Model: m}, Config{Seed: 25, Recorder: rec, Speeds: sp})
		for _, id := range []int64{a.ID, b.ID, c.ID, d.ID, 100, 101, 102, 103} {
			wantDoc(t, rec, m, id)
		}
	}
}

// TestScenarioRestartAfterShardKeyChange: X is inserted with sk 1 and its
// shard key changed to 5 on the same shard (one update, o2 the old
// document key). The subtask's saved checkpoint is still below the insert
// (checkpoints are saved now and then) when it is killed after applying
// everything: the restart applies the insert again, whose replacement is
// filtered on the old {sk, _id}, against the document with the new key. It
// must neither insert a second X (E11000 on a real target) nor stop.
func TestScenarioRestartAfterShardKeyChange(t *testing.T) {
	targets := []*Target{nil}
	for _, key := range TargetShapes {
		targets = append(targets, &Target{Major: 7, Key: key, Shards: 3}, &Target{Major: 8, Key: key, Shards: 3})
	}
	for _, tgt := range targets {
		name := "replica set"
		if tgt != nil {
			name = tgt.Describe()
		}
		t.Run(name, func(t *testing.T) {
			// The kill must come before a checkpoint passes X's insert,
			// which depends on when the periodic saves fall: a run where
			// one already had is run again (each run must still end with
			// X right).
			for attempt := 1; ; attempt++ {
				if restartAfterKeyChange(t, tgt) {
					return
				}
				if attempt == 10 {
					t.Fatal("in 10 runs the checkpoint always passed X's insert before the kill")
				}
			}
		})
	}
}

// TestScenarioIDReuseAcrossShards: the application deletes _id X on s0 and
// inserts X with a shard key s1 owns, then updates it (MongoDB lets it:
// _id is unique within a shard, and the application kept it unique across
// them at every moment). Whichever reader is ahead, X must be on the
// target with its last version.
func TestScenarioIDReuseAcrossShards(t *testing.T) {
	for _, slow := range []int{0, 1} {
		t.Run(fmt.Sprintf("s%d behind", slow), func(t *testing.T) {
			m := NewModel(27, "app.users", 2, false).With(Behaviours{Version: 70, Clocks: true})
			x := m.Insert(3)
			m.Update(x.ID)
			m.Delete(x.ID)
			m.InsertID(x.ID, 15)
			m.Update(x.ID)
			m.Finish()
			rec := NewRecorder(m)
			mustRun(t, Schedule{Seed: 27, Model: m}, Config{Seed: 27, Recorder: rec, Speeds: slowFast(m, m.Shards[slow])})
			wantDoc(t, rec, m, x.ID)
		})
	}
}

// restartAfterKeyChange runs TestScenarioRestartAfterShardKeyChange's
// schedule once and reports whether s0 was restarted from below X's
// insert; either way the target must end with X as the source has it.
func restartAfterKeyChange(t *testing.T, shape *Target) bool {
	t.Helper()
	var tgt *Target // a new target each run: it keeps what was sharded
	if shape != nil {
		tgt = &Target{Major: shape.Major, Key: shape.Key, Shards: shape.Shards}
	}
	m := NewModel(26, "app.users", 2, false)
	s0 := m.Owner(0)
	x := m.Insert(1)
	m.Update(x.ID)
	m.ChangeKeyInPlace(x.ID, 5)
	m.Update(x.ID)
	m.Finish()
	rec := NewRecorder(m)
	var last bson.Timestamp
	for _, w := range m.Writes {
		if w.Shard == s0.Name && w.TS.After(last) {
			last = w.TS
		}
	}
	killed := false
	mustRun(t, Schedule{Seed: 26, Model: m}, Config{Seed: 26, Recorder: rec, Sharded: tgt, CheckpointInterval: 100 * time.Millisecond,
		Speeds: map[string]int{s0.Name: 1000, m.Shards[1].Name: 1000},
		Kill: func(int) string {
			if !killed && rec.AppliedFrom(s0.Name, last) > 0 {
				killed = true
				return s0.Name
			}
			return ""
		}})
	wantDoc(t, rec, m, x.ID)
	for _, st := range rec.starts[s0.Name][1:] {
		if st.from.Before(x.firstTS(m, s0)) {
			return true
		}
	}
	t.Logf("%s was not restarted from below X's insert (%+v): running again", s0.Name, rec.starts[s0.Name])
	return false
}
