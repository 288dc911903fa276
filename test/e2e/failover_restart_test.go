package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestFailoverWhileStopped stops replay while the primary holds writes a
// majority does not (replay saving its checkpoint as it stops), fails the
// replica set over while nothing runs, and starts replay again from the
// saved checkpoint, as a restarted run does after its resume checks:
// the checkpoint is at or below the commit point, the new primary holds
// its entry, and the target ends equal to the source, the rolled-back
// writes absent.
func TestFailoverWhileStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := nextSeed()
	dst := testserver.Start(t)
	dc := dst.MustClient(t)
	rs := startReplSet(t, "rs0")
	l := newLoad(seed, 0, 40)
	run := func(from bson.Timestamp) (*subtask, func()) {
		st := newSubtask(ctx, t, rs, dc, nil, "", withCap(), from)
		return st, st.start(ctx, t)
	}
	st, stop := run(bson.Timestamp{})
	l.writes(t, rs, 30, "committed")
	time.Sleep(300 * time.Millisecond)
	rs.cutOff()
	l.writes(t, rs, 12, "rolled-back")
	time.Sleep(time.Second)
	stop()
	rec, err := st.store.Task(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commit, _ := rs.commitPoint()
	if rec.AppliedTS.Compare(commit) > 0 {
		t.Fatalf("checkpoint %v saved past the majority commit point %v", rec.AppliedTS, commit)
	}
	rolled := rs.failover(t)
	l.resync(rs)
	l.writes(t, rs, 20, "new-primary")
	if rec.AppliedEntry == nil {
		t.Fatal("checkpoint saved without its entry")
	}
	sc := startClient(ctx, t, rs)
	if err := source.CheckRollback(ctx, sc, *rec.AppliedEntry); err != nil {
		t.Fatalf("the resume check refuses a checkpoint of committed entries: %v", err)
	}
	st2, stop2 := run(rec.AppliedTS)
	want := map[string]bson.Raw{}
	rs.docs(want)
	diff := waitSame(t, dc, want, 20*time.Second)
	stop2()
	if diff != "" {
		t.Fatalf("seed %d, %d entries rolled back while replay was stopped: %s", seed, rolled, diff)
	}
	checkpointInHistory(ctx, t, st2, rs, "")
	t.Logf("seed %d: stopped at %v (commit point %v), %d entries rolled back, %d documents equal", seed, rec.AppliedTS, commit, rolled, len(want))
}

// TestFailoverRepeated fails a replica set over three times in one run,
// each time after a random number of replicated and unreplicated writes,
// and without waiting for replay before the second and third: the target
// ends equal to the source.
func TestFailoverRepeated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := nextSeed()
	dst := testserver.Start(t)
	dc := dst.MustClient(t)
	rs := startReplSet(t, "rs0")
	st := newSubtask(ctx, t, rs, dc, nil, "", withCap(), bson.Timestamp{})
	stop := st.start(ctx, t)
	l := newLoad(seed, 0, 30)
	total := 0
	for round := range 3 {
		l.writes(t, rs, 5+l.rng.IntN(20), fmt.Sprintf("committed%d", round))
		rs.cutOff()
		l.writes(t, rs, 1+l.rng.IntN(10), fmt.Sprintf("rolled-back%d", round))
		if round == 0 {
			time.Sleep(time.Second)
		} else {
			time.Sleep(time.Duration(l.rng.IntN(300)) * time.Millisecond)
		}
		total += rs.failover(t)
		l.resync(rs)
	}
	l.writes(t, rs, 10, "last")
	want := map[string]bson.Raw{}
	rs.docs(want)
	diff := waitSame(t, dc, want, 20*time.Second)
	stop()
	if diff != "" {
		t.Fatalf("seed %d, %d entries rolled back over three failovers: %s", seed, total, diff)
	}
	checkpointInHistory(ctx, t, st, rs, "")
	t.Logf("seed %d: %d entries rolled back over three failovers, %d documents equal; tailer %+v", seed, total, len(want), st.tailer.Stats())
}
