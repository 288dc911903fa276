package shardsim

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The scenarios of this file deliver a transaction's commit to one
// participant late. The coordinator sends commitTransaction to the
// participants once its decision is durable, and each logs its commit
// when the message comes (TransactionCoordinator::runCommit,
// s/transaction_coordinator.cpp). A client that learnt of the commit
// (the router's reply, at the decision on 5.0 to 6.0, or a read of a
// participant that has committed) can write again while another
// participant still holds its part prepared, so that shard logs its
// commit entry after those writes on other shards, and after other
// transactions of its own.

// changeKeyLate prepares a shard-key change of x from its shard to sk
// (a delete there and an insert on sk's owner, one transaction),
// commits it on the new shard only, and returns the transaction and the
// old shard, whose commit is still to come. The model's document is the
// new one from the decision on.
func changeKeyLate(m *Model, x Doc, sk int64) (*Txn, *Shard) {
	from, to := m.owner[x.SK/chunkWidth], m.owner[sk/chunkWidth]
	nd := Doc{ID: x.ID, SK: sk, V: m.Docs[x.ID].V + 1}
	seq := m.nextSeq(x.ID)
	del := &part{shard: from, ops: []bson.D{m.inner("d", m.Docs[x.ID].key(), nil)}, writes: []Write{{WriteKey: WriteKey{ID: x.ID}, Seq: seq, Kind: 'd'}}}
	ins := &part{shard: to, ops: []bson.D{m.inner("i", nd.raw(), m.insertKey(nd))}, writes: []Write{{WriteKey: WriteKey{ID: x.ID}, Seq: seq, Kind: 'i'}}}
	t := m.NewTxn([]*part{del, ins})
	t.Prepare(from)
	t.Prepare(to)
	t.Decide(true)
	m.Docs[x.ID] = nd
	m.KeyChanges++
	t.Commit(to)
	if t.acked.After(m.lastWrite[x.ID]) {
		m.lastWrite[x.ID] = t.acked // what a client that learnt of the commit brings
	}
	return t, from
}

// TestScenarioLateCommitBesideCommitWait: a shard-key change moves X
// from A to B in a transaction whose commit reaches B at once and A
// late. A client writes X on B again (an update, or a
// move on to C), and a second transaction, on A and B, prepares and
// commits on A before A logs the first one's commit. Until A's subtask
// reads that late commit, the target holds A's older X, which B's (or
// C's) insert of X meets; A's subtask meets the second transaction's
// commit first. Whichever reader is ahead or behind, the target must end
// with the source's documents, every write in order.
func TestScenarioLateCommitBesideCommitWait(t *testing.T) {
	for _, b := range []Behaviours{
		{Version: 80, Clocks: true, Coordinator: true, ConfigDocs: true},
		{Version: 50, Clocks: true, Coordinator: true, ConfigDocs: true},
	} {
		for _, moveOn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s move on %v", b.name(), moveOn), func(t *testing.T) {
				m := NewModel(47, "app.users", 3, false).With(b)
				a := m.Owner(0)
				cb := otherChunk(m, a)
				bs := m.Owner(cb)
				cc := -1
				for c := range chunkCount {
					if s := m.Owner(c); s != a && s != bs {
						cc = c
					}
				}
				if cc < 0 {
					t.Fatal("no chunk on a third shard")
				}
				x := m.Insert(3)
				y := m.Insert(4)
				z := m.Insert(int64(cb*chunkWidth + 1))
				t1, old := changeKeyLate(m, x, int64(cb*chunkWidth+5))
				if moveOn {
					m.Delete(x.ID)
					m.InsertID(x.ID, int64(cc*chunkWidth+2))
				} else {
					m.Update(x.ID)
				}
				t2 := m.NewTxn(m.Parts(TxnWrite{Kind: 'u', ID: y.ID}, TxnWrite{Kind: 'u', ID: z.ID}))
				t2.Prepare(a)
				t2.Prepare(bs)
				t2.Commit(a)
				t2.Commit(bs)
				t2.End()
				t1.Commit(old)
				t1.End()
				m.Update(y.ID)
				m.Finish()
				t.Logf("A %s, B %s", a.Name, bs.Name)
				speeds := []map[string]int{nil, slowFast(m, a), slowFast(m, bs)}
				for _, v := range []int{1, 2, 4} {
					speeds = append(speeds, map[string]int{a.Name: v, bs.Name: 1000, m.Owner(cc).Name: 1000}, map[string]int{a.Name: 1000, bs.Name: v, m.Owner(cc).Name: 1000})
				}
				for _, sp := range speeds {
					rec := NewRecorder(m)
					res := mustRun(t, Schedule{Seed: 47, Model: m}, Config{Seed: 47, Recorder: rec, Speeds: sp})
					for _, id := range []int64{x.ID, y.ID, z.ID} {
						wantDoc(t, rec, m, id)
					}
					t.Logf("speeds %v: A commit waits %d, B conflicts %d waits %d (%.3fs), stepped over %d, re-read %d; A conflicts %d", sp,
						res.Holds[a.Name].CommitWaits, res.Holds[bs.Name].Conflicts, res.Holds[bs.Name].ConflictWaits, res.Holds[bs.Name].ConflictWaitSeconds,
						res.Holds[bs.Name].SteppedOver, res.Holds[bs.Name].ConflictsReRead, res.Holds[a.Name].Conflicts)
				}
			})
		}
	}
}
