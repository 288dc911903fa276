package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
)

// failoverLoad writes to a replica set around a failover and keeps what
// the source must end with: writes with w: 1, the first replicated, the
// next not (the secondaries cut off), then a failover, then writes on the
// new primary. ids are the documents the set owns (a shard's share).
type failoverLoad struct {
	rng  *rand.Rand
	live map[int]bool // documents that exist on the primary
	ids  []int
}

// writes makes n writes on rs: inserts of unused ids, replacements and
// deletes of live ones, tagged with what they are.
func (l *failoverLoad) writes(t *testing.T, rs *replSet, n int, tag string) {
	t.Helper()
	for k := range n {
		var live, free []int
		for _, id := range l.ids {
			if l.live[id] {
				live = append(live, id)
			} else {
				free = append(free, id)
			}
		}
		label := fmt.Sprintf("%s-%d", tag, k)
		switch r := l.rng.IntN(10); {
		case r < 5 && len(free) > 0 || len(live) == 0:
			id := free[l.rng.IntN(len(free))]
			rs.write(t, "i", fdoc(id, k, label))
			l.live[id] = true
		case r < 8:
			id := live[l.rng.IntN(len(live))]
			rs.write(t, "u", fdoc(id, 1000+k, label))
		default:
			id := live[l.rng.IntN(len(live))]
			rs.write(t, "d", fdoc(id, 0, label))
			l.live[id] = false
		}
	}
}

// resync makes live what rs holds after a rollback.
func (l *failoverLoad) resync(rs *replSet) {
	docs := map[string]bson.Raw{}
	rs.docs(docs)
	clear(l.live)
	for _, d := range docs {
		id, _ := d.Lookup("_id").AsInt64OK()
		l.live[int(id)] = true
	}
}

// newLoad writes to the n documents with _id first, first+1, ...
func newLoad(seed uint64, first, n int) *failoverLoad {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = first + i
	}
	return &failoverLoad{rng: rand.New(rand.NewPCG(seed, 35)), live: map[int]bool{}, ids: ids}
}

// withCap is false only in the break check: MONGOFERRY_BREAK_CAP=1 runs
// the failover tests with the majority cap removed, where they must fail.
func withCap() bool { return os.Getenv("MONGOFERRY_BREAK_CAP") == "" }

// failover drives one replica set through its writes and failover: 30
// replicated writes, 12 that are not, the failover, 20 on the new primary.
// It waits between them so that replay has read whatever it may read.
func failover(t *testing.T, rs *replSet, l *failoverLoad) (rolled int) {
	t.Helper()
	l.writes(t, rs, 30, "committed")
	time.Sleep(300 * time.Millisecond)
	rs.cutOff()
	l.writes(t, rs, 12, "rolled-back")
	time.Sleep(time.Second) // the tailer has read them: a cap must hold them
	rolled = rs.failover(t)
	l.resync(rs)
	l.writes(t, rs, 20, "new-primary")
	return rolled
}

// TestFailoverReplicaSet replays a replica set (the wire stand-in, see
// replSet) into a FerretDB target with the real tailer and replayer
// while it takes w: 1 writes, fails over and rolls back: the target ends
// equal to the source byte for byte, the rolled-back writes absent, and
// the checkpoint names an entry of the new primary's history.
// -count=20 runs it with 20 seeds.
func TestFailoverReplicaSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := nextSeed()
	dst := testserver.Start(t)
	dc := dst.MustClient(t)
	rs := startReplSet(t, "rs0")
	st := newSubtask(ctx, t, rs, dc, nil, "", withCap(), bson.Timestamp{})
	stop := st.start(ctx, t)
	rolled := failover(t, rs, newLoad(seed, 0, 40))
	want := map[string]bson.Raw{}
	rs.docs(want)
	diff := waitSame(t, dc, want, 20*time.Second)
	stop()
	if diff != "" {
		t.Fatalf("seed %d, %d entries rolled back: the target differs from the source after the failover: %s", seed, rolled, diff)
	}
	checkpointInHistory(ctx, t, st, rs, "")
	t.Logf("seed %d: %d entries rolled back, %d documents equal; tailer %+v", seed, rolled, len(want), st.tailer.Stats())
}

// TestFailoverShardOfCluster is TestFailoverReplicaSet for a sharded
// source of two shards (two replica sets, each its own subtask: tailer
// and replayer on a shared position board, as `ferry run` runs them),
// where shard1 fails over and rolls back while shard0 keeps writing.
func TestFailoverShardOfCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seed := nextSeed()
	dst := testserver.Start(t)
	dc := dst.MustClient(t)
	positions := board.NewMemoryBoard()
	sets := []*replSet{startReplSet(t, "shard0"), startReplSet(t, "shard1")}
	for _, rs := range sets {
		if err := positions.Publish(ctx, board.Position{Shard: rs.name}); err != nil {
			t.Fatal(err)
		}
	}
	subs := make([]*subtask, len(sets))
	stops := make([]func(), len(sets))
	for i, rs := range sets {
		subs[i] = newSubtask(ctx, t, rs, dc, positions, rs.name, withCap(), bson.Timestamp{})
		stops[i] = subs[i].start(ctx, t)
	}
	// Each shard owns its chunk of _id: shard0 0-39, shard1 40-79.
	steady := newLoad(seed, 0, 40)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for k := range 6 {
			steady.writes(t, sets[0], 10, fmt.Sprintf("shard0-%d", k))
			time.Sleep(300 * time.Millisecond)
		}
	}()
	rolled := failover(t, sets[1], newLoad(seed+1000, 40, 40))
	<-wrote
	want := map[string]bson.Raw{}
	for _, rs := range sets {
		rs.docs(want)
	}
	diff := waitSame(t, dc, want, 20*time.Second)
	for _, stop := range stops {
		stop()
	}
	if diff != "" {
		t.Fatalf("seed %d, %d entries of shard1 rolled back: the target differs from the source after the failover: %s", seed, rolled, diff)
	}
	for i, rs := range sets {
		checkpointInHistory(ctx, t, subs[i], rs, rs.name)
	}
	t.Logf("seed %d: %d entries of shard1 rolled back, %d documents equal; shard1's tailer %+v", seed, rolled, len(want), subs[1].tailer.Stats())
}

var seedCounter uint64

// nextSeed gives each run of a -count loop its own seed.
func nextSeed() uint64 {
	seedCounter++
	return seedCounter
}
