package replay

import (
	"context"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// coordID is a coordinator document's _id: the transaction's session
// and number.
func coordID(txn int64) bson.D { return session(txn) }

// coordDoc is a config.transaction_coordinators document: its
// participants and, when set, the decision.
func coordDoc(txn int64, participants []string, decision bson.D) bson.D {
	doc := bson.D{{Key: "_id", Value: coordID(txn)}, {Key: "participants", Value: participants}}
	if decision != nil {
		doc = append(doc, bson.E{Key: "decision", Value: decision})
	}
	return doc
}

func commitDecision(cts bson.Timestamp) bson.D {
	return bson.D{{Key: "decision", Value: "commit"}, {Key: "commitTimestamp", Value: cts}}
}

// coordOp is the coordinator's write of config.transaction_coordinators:
// its participants, then (cts set) the same with the commit decision, a
// replacement (s/transaction_coordinator_util.cpp).
func coordOp(txn int64, participants []string, cts bson.Timestamp) bson.D {
	if cts.IsZero() {
		return bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "config.transaction_coordinators"}, {Key: "o", Value: coordDoc(txn, participants, nil)}}
	}
	return bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: "config.transaction_coordinators"}, {Key: "o", Value: coordDoc(txn, participants, commitDecision(cts))},
		{Key: "o2", Value: bson.D{{Key: "_id", Value: coordID(txn)}}}}
}

func coordDone(txn int64) bson.D {
	return bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: "config.transaction_coordinators"}, {Key: "o", Value: bson.D{{Key: "_id", Value: coordID(txn)}}}}
}

// TestDecisionNamesTheCommittingTransaction: the transaction a
// coordinator's decision names is the one its participants' commit
// entries carry, and only a commit decision with its timestamp counts.
func TestDecisionNamesTheCommittingTransaction(t *testing.T) {
	commit, err := oplog.Parse(entry(t, at(9), commitOp(7, at(5), at(4))))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := oplog.TxnID(commit)
	for _, tc := range []struct {
		name string
		doc  bson.D
		ok   bool
	}{
		{"commit decision", coordDoc(7, []string{"s1", "s0"}, commitDecision(at(5))), true},
		{"participants only", coordDoc(7, []string{"s1", "s0"}, nil), false},
		{"abort decision", coordDoc(7, []string{"s1", "s0"}, bson.D{{Key: "decision", Value: "abort"}}), false},
		{"commit decision without its timestamp", coordDoc(7, []string{"s1", "s0"}, bson.D{{Key: "decision", Value: "commit"}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := bson.Marshal(tc.doc)
			if err != nil {
				t.Fatal(err)
			}
			d, ok := decisionOf(raw)
			if ok != tc.ok {
				t.Fatalf("decision read %v, want %v (%+v)", ok, tc.ok, d)
			}
			if ok && (d.Txn != want || !d.Commit.Equal(at(5)) || len(d.Participants) != 2 || d.Participants[0] != "s1") {
				t.Errorf("decision %+v, want txn %s at %v on [s1 s0]", d, want, at(5))
			}
		})
	}
}

// TestCommitWaitsForParticipants: a shard-key change moves _id 1 from
// s0 to s1 in a transaction coordinated by s0; s2 takes no part and its
// subtask is pinned at its start. With the coordinator's decision on
// s0's oplog, s1's inserting part waits for s0 alone and lands while s2
// is still pinned. Without it (its subtask has not read one, here: the
// source logged none) s1's part waits for every subtask, s2 included,
// and lands once s2 goes on.
func TestCommitWaitsForParticipants(t *testing.T) {
	for _, withDecision := range []bool{true, false} {
		name := map[bool]string{true: "decision on the board", false: "no decision: every subtask"}[withDecision]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := oplogs{}.add(t, "s0", 1, insOp(1, 5, 1))
			if withDecision {
				logs.add(t, "s0", 2, coordOp(1, []string{"s0", "s1"}, bson.Timestamp{}))
			}
			logs.add(t, "s0", 3, prepareOp(1, delOp(1, 5))).add(t, "s1", 4, prepareOp(1, insOp(1, 50, 2)))
			if withDecision {
				logs.add(t, "s0", 5, coordOp(1, []string{"s0", "s1"}, at(4)))
			}
			logs.add(t, "s0", 6, commitOp(1, at(4), at(3))).add(t, "s1", 7, commitOp(1, at(4), at(4)))
			if withDecision {
				logs.add(t, "s0", 8, coordDone(1))
			}
			logs.add(t, "s0", 20, noopOp()).add(t, "s1", 21, noopOp()).
				add(t, "s2", 1, insOp(9, 100, 1)).add(t, "s2", 40, noopOp())
			c := newCluster(t, logs)
			var released atomic.Bool
			c.open["s2"] = released.Load
			c.start(ctx)
			defer c.stop()

			moved := func() bool { d, ok := c.store.get(1); return ok && field(d, "sk") == 50 }
			if withDecision {
				deadline := time.Now().Add(5 * time.Second)
				for !moved() && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !moved() {
					ps, _ := c.board.Positions(ctx)
					t.Fatalf("s1's part did not land while s2, no participant, is pinned: board %+v", ps)
				}
			} else {
				deadline := time.Now().Add(5 * time.Second)
				for c.runs["s1"].r.Status().Holds.CommitWaits == 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond)
				if moved() {
					t.Fatal("s1's part landed before s2 passed the commit timestamp, with no decision naming the participants")
				}
			}
			released.Store(true)
			if err := c.wait(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if d, ok := c.store.get(1); !ok || field(d, "sk") != 50 || field(d, "v") != 2 {
				t.Errorf("_id 1 is %v (exists %v) on the target, want sk 50 v 2", d, ok)
			}
			h := c.runs["s1"].r.Status().Holds
			wantAll := map[bool]int64{true: 0, false: 1}[withDecision]
			if h.CommitWaits != 1 || h.CommitWaitsAll != wantAll {
				t.Errorf("s1 waited at %d commits, %d for every subtask; want 1 and %d", h.CommitWaits, h.CommitWaitsAll, wantAll)
			}
		})
	}
}

// TestDecisionsOfFixtures reads the coordinator's writes mongod logs
// (test/shardsim/testdata, docs/oplog-shapes.md): every commitTransaction
// entry of a participant finds its transaction's decision, read from the
// coordinator shard's oplog, with its commitTimestamp and its shard among
// the participants; an aborted transaction publishes none.
func TestDecisionsOfFixtures(t *testing.T) {
	forEachShapeFixture(t, func(t *testing.T, entries []fixtureEntry) {
		var h holds
		var commits []oplog.Entry
		var shards []string
		for _, x := range entries {
			e, err := oplog.Parse(x.Entry)
			if err != nil {
				t.Fatal(err)
			}
			if e.Namespace().DB == "config" {
				h.marker(e, e.TS(), x.Shard)
			}
			if e.Command() == oplog.CmdCommitTransaction {
				commits, shards = append(commits, e), append(shards, x.Shard)
			}
		}
		if len(commits) == 0 {
			t.Fatal("no commitTransaction entry in the fixture")
		}
		for i, e := range commits {
			id, _ := oplog.TxnID(e)
			d, ok := findDecision(nil, h.decisions(), id, commitTS(e))
			if !ok || !slices.Contains(d.Participants, shards[i]) {
				t.Errorf("shard %s's commit at %v (txn %s, commitTimestamp %v) finds no decision naming it: %+v", shards[i], e.TS(), id, commitTS(e), h.decisions())
			}
		}
		if n := len(h.decisions()); n != len(commits)/2 {
			t.Errorf("%d decisions read, want %d (one per committed transaction of two shards)", n, len(commits)/2)
		}
	})
}

// TestDecisionsSavedAndForgotten: a decision is saved with the
// checkpoint and read back, and forgotten only once every other
// participant has applied its part.
func TestDecisionsSavedAndForgotten(t *testing.T) {
	d := board.Decision{Txn: "t1", Commit: at(10), Participants: []string{"s0", "s1", "s2"}}
	var h holds
	h.decide(d, at(11))
	var back holds
	rest, _, _ := back.recoverState(h.stateEntries(bson.Timestamp{}))
	if len(rest) != 0 || !reflect.DeepEqual(back.decisions(), []board.Decision{d}) {
		t.Fatalf("recovered %+v (and %d other entries), want [%+v]", back.decisions(), len(rest), d)
	}
	for _, step := range []struct {
		name string
		ps   []board.Position
		kept bool
	}{
		{"a participant behind the commit", []board.Position{{Shard: "s1", Applied: at(12)}, {Shard: "s2", Applied: at(5)}}, true},
		{"a participant past it with its part still prepared", []board.Position{{Shard: "s1", Applied: at(12)}, {Shard: "s2", Applied: at(12), Prepared: []string{"t1"}}}, true},
		{"a non-participant behind", []board.Position{{Shard: "s1", Applied: at(12)}, {Shard: "s2", Retired: true}, {Shard: "s3", Applied: at(1)}}, false},
	} {
		back.release("s0", step.ps)
		if kept := len(back.decisions()) == 1; kept != step.kept {
			t.Errorf("%s: decision kept %v, want %v", step.name, kept, step.kept)
		}
	}
}

// TestCommitWaitsFor: the positions a commit waits for are its
// participants' only when a decision for its transaction and commit
// timestamp names this shard and each participant is on the board.
func TestCommitWaitsFor(t *testing.T) {
	ps := []board.Position{{Shard: "s0"}, {Shard: "s1"}, {Shard: "s2"}}
	d := board.Decision{Txn: "t1", Commit: at(10), Participants: []string{"s0", "s1"}}
	for _, tc := range []struct {
		name   string
		own    []board.Decision
		board  []board.Decision
		txn    string
		cts    bson.Timestamp
		want   []string
		subset bool
	}{
		{"decision on the board", nil, []board.Decision{d}, "t1", at(10), []string{"s0", "s1"}, true},
		{"decision read by this subtask", []board.Decision{d}, nil, "t1", at(10), []string{"s0", "s1"}, true},
		{"no decision yet", nil, nil, "t1", at(10), []string{"s0", "s1", "s2"}, false},
		{"another transaction's", nil, []board.Decision{d}, "t2", at(10), []string{"s0", "s1", "s2"}, false},
		{"another commit timestamp", nil, []board.Decision{d}, "t1", at(11), []string{"s0", "s1", "s2"}, false},
		{"this shard not named", nil, []board.Decision{{Txn: "t1", Commit: at(10), Participants: []string{"s0", "s2"}}}, "t1", at(10), []string{"s0", "s1", "s2"}, false},
		{"a participant not on the board", nil, []board.Decision{{Txn: "t1", Commit: at(10), Participants: []string{"s1", "s9"}}}, "t1", at(10), []string{"s0", "s1", "s2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			board := slices.Clone(ps)
			board[0].Decided = tc.board
			got, subset := commitWaitsFor("s1", board, tc.own, tc.txn, tc.cts)
			var names []string
			for _, p := range got {
				names = append(names, p.Shard)
			}
			if subset != tc.subset || !slices.Equal(names, tc.want) {
				t.Errorf("waits for %v (participants only: %v), want %v (%v)", names, subset, tc.want, tc.subset)
			}
		})
	}
}
