package shardsim

import (
	"testing"
	"time"
)

// TestCommitWaitsForParticipantsOnly measures what waiting for a
// transaction's participants alone saves. s2 takes part in no
// transaction and its reader is far behind: 300 inserts come before the
// transactions on its oplog, delivered one every 8 rounds. Ten
// transactions between s0 and s1 each insert a document on both. With
// the coordinator's config.transaction_coordinators documents
// (Behaviours.Coordinator) each commit waits for s0 and s1 alone;
// without them, for s2 too. Either way the target ends as the source.
func TestCommitWaitsForParticipantsOnly(t *testing.T) {
	for _, coord := range []bool{true, false} {
		name := map[bool]string{true: "coordinator's decisions", false: "no decision: every subtask"}[coord]
		t.Run(name, func(t *testing.T) {
			m := NewModel(26, "app.users", 3, false).With(Behaviours{Version: 80, Coordinator: coord})
			s0, s1, s2 := m.Owner(0), m.Owner(1), m.Owner(2)
			if s0 == s1 || s1 == s2 || s0 == s2 {
				t.Fatalf("chunks 0 to 2 are not on three shards: %s %s %s", s0.Name, s1.Name, s2.Name)
			}
			var ids []int64
			for i := range int64(300) {
				ids = append(ids, m.Insert(20+i%10).ID)
			}
			for i := range int64(10) {
				a, b := 100000+2*i, 100001+2*i
				txn := m.NewTxn(m.Parts(TxnWrite{Kind: 'i', ID: a, SK: 3}, TxnWrite{Kind: 'i', ID: b, SK: 13}))
				txn.Prepare(s0)
				txn.Prepare(s1)
				txn.Commit(s0)
				txn.Commit(s1)
				txn.End()
				ids = append(ids, a, b)
			}
			m.Finish()
			rec := NewRecorder(m)
			started := time.Now()
			res := mustRun(t, Schedule{Seed: 26, Model: m}, Config{Seed: 26, Recorder: rec,
				Speeds: map[string]int{s0.Name: 50, s1.Name: 50, s2.Name: 0}})
			for _, id := range ids {
				wantDoc(t, rec, m, id)
			}
			var waits, all int64
			var secs float64
			for _, h := range res.Holds {
				waits, all, secs = waits+h.CommitWaits, all+h.CommitWaitsAll, secs+h.CommitWaitSeconds
			}
			t.Logf("%d commit waits, %d of them for every subtask, %.2f s waited in all; run %s",
				waits, all, secs, time.Since(started).Round(time.Millisecond))
			if waits != 20 {
				t.Errorf("%d commit waits, want 20 (each part of ten transactions inserts)", waits)
			}
			if coord && all == waits || !coord && all != waits {
				t.Errorf("%d of %d commit waits waited for every subtask, with the coordinator's documents %v", all, waits, coord)
			}
		})
	}
}
