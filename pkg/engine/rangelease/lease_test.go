package rangelease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestConcurrentClaimants has several workers claim the same range at
// once, round after round, on FerretDB (whose update is a read and a
// rewrite, not atomic): exactly one wins each round.
func TestConcurrentClaimants(t *testing.T) {
	srv := testserver.Start(t)
	db := srv.MustClient(t).Database("mongoferry")
	ctx := context.Background()
	const rounds, claimants = 20, 6
	contended := 0
	for round := range rounds {
		id := fmt.Sprintf("app.c/%06d", round)
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range claimants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := New(db, Options{Task: "race", Owner: fmt.Sprintf("w%d", w), TTL: time.Minute})
				<-start
				lease, _, err := l.Claim(ctx, []string{id})
				if err != nil {
					t.Error(err)
					return
				}
				if lease != nil {
					won.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("round %d: %d of %d claimants hold the range, want exactly 1", round, n, claimants)
		}
		contended += claimants - 1
	}
	t.Logf("%d rounds of %d claimants at once: each range claimed once, %d claims refused", rounds, claimants, contended)
}

// worker copies ranges until every one is done: each range is five
// documents inserted (duplicates from an earlier, killed attempt are
// tolerated), renewed between them. killAfter > 0 kills it mid-range
// after that many claims: it writes part of the range and stops.
type worker struct {
	name      string
	l         *Leaser
	target    *mongo.Collection
	killAfter int
	claims    int
	killed    bool
}

func (w *worker) run(ctx context.Context, ranges []string, copies map[string]*atomic.Int32, takeovers *atomic.Int32) error {
	for {
		lease, open, err := w.l.Claim(ctx, ranges)
		if err != nil {
			return err
		}
		if lease == nil {
			if open == 0 {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		w.claims++
		if lease.TakenOver {
			takeovers.Add(1)
		}
		killNow := w.killAfter > 0 && w.claims == w.killAfter
		err = w.copyRange(ctx, lease, killNow)
		if killNow {
			w.killed = true
			return nil // SIGKILL: no renewal, no done record
		}
		if errors.Is(err, ErrLeaseLost) {
			continue
		}
		if err != nil {
			return err
		}
		if err := w.l.Finish(ctx, lease, 5, 0); errors.Is(err, ErrLeaseLost) {
			continue
		} else if err != nil {
			return err
		}
		copies[lease.Range].Add(1)
	}
}

func (w *worker) copyRange(ctx context.Context, lease *Lease, killNow bool) error {
	var idx int
	if _, err := fmt.Sscanf(lease.Range, "app.c/%d", &idx); err != nil {
		return err
	}
	for k := range 5 {
		if killNow && k == 2 {
			return nil
		}
		_, err := w.target.InsertOne(ctx, bson.D{{Key: "_id", Value: idx*100 + k}, {Key: "by", Value: w.name}})
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return err
		}
		if err := w.l.Renew(ctx, lease); err != nil {
			return err
		}
	}
	return nil
}

// TestWorkersWithKill has four workers copy 24 ranges of one collection
// on FerretDB, one of them killed mid-range: the killed range is taken
// over once its lease goes unrenewed for the TTL, every range is
// recorded done once, copied to its end by exactly one worker, and the
// target holds every document once.
func TestWorkersWithKill(t *testing.T) {
	srv := testserver.Start(t)
	client := srv.MustClient(t)
	db := client.Database("mongoferry")
	target := client.Database("app").Collection("c")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const nRanges, nWorkers = 24, 4
	var ranges []string
	copies := map[string]*atomic.Int32{}
	for i := range nRanges {
		id := fmt.Sprintf("app.c/%06d", i)
		ranges = append(ranges, id)
		copies[id] = &atomic.Int32{}
	}
	var takeovers atomic.Int32
	workers := make([]*worker, nWorkers)
	var wg sync.WaitGroup
	started := time.Now()
	for i := range workers {
		w := &worker{name: fmt.Sprintf("w%d", i), target: target,
			l: New(db, Options{Task: "copy", Owner: fmt.Sprintf("w%d", i), TTL: 500 * time.Millisecond})}
		if i == 0 {
			w.killAfter = 1
		}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(ctx, ranges, copies, &takeovers); err != nil {
				t.Errorf("worker %s: %v", w.name, err)
			}
		}()
	}
	wg.Wait()
	if !workers[0].killed {
		t.Fatal("the worker to kill never claimed a range")
	}
	done, err := New(db, Options{Task: "copy"}).Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ranges {
		if _, ok := done[id]; !ok {
			t.Errorf("range %s not recorded done", id)
		}
		if n := copies[id].Load(); n != 1 {
			t.Errorf("range %s copied to its end %d times, want 1", id, n)
		}
	}
	if n, err := target.CountDocuments(ctx, bson.D{}); err != nil || n != nRanges*5 {
		t.Errorf("target holds %d documents (%v), want %d", n, err, nRanges*5)
	}
	leases, err := db.Collection(Collection).CountDocuments(ctx, bson.D{{Key: "task", Value: "copy"}, {Key: "done", Value: false}})
	if err != nil {
		t.Fatal(err)
	}
	if takeovers.Load() < 1 {
		t.Errorf("no range was taken over from the killed worker")
	}
	claims := 0
	for _, w := range workers {
		claims += w.claims
	}
	t.Logf("%d workers, %d ranges in %s: %d claims (%d leases written), %d taken over from the killed worker, %d done records, each range copied to its end once",
		nWorkers, nRanges, time.Since(started).Round(time.Millisecond), claims, leases, takeovers.Load(), len(done))
}

// TestUpdateClaimsRace shows why a claim is an insert: claiming by an
// update filtered on the old owner (the compare-and-set MongoDB makes
// atomic) lets several claimants win one round on FerretDB, whose update
// reads the document and rewrites it. It logs how often and asserts
// nothing (a server with atomic updates has none).
func TestUpdateClaimsRace(t *testing.T) {
	srv := testserver.Start(t)
	coll := srv.MustClient(t).Database("mongoferry").Collection("casrace")
	ctx := context.Background()
	const rounds, claimants = 30, 6
	doubled := 0
	for round := range rounds {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: round}, {Key: "owner", Value: ""}}); err != nil {
			t.Fatal(err)
		}
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range claimants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: round}, {Key: "owner", Value: ""}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: fmt.Sprintf("w%d", w)}}}}, options.UpdateOne())
				if err == nil && r.ModifiedCount == 1 {
					won.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if won.Load() > 1 {
			doubled++
		}
	}
	t.Logf("claims by update filtered on the old owner: %d of %d rounds of %d claimants had more than one winner", doubled, rounds, claimants)
}

// TestStalledHolder has a holder stop renewing for longer than the TTL
// while another worker claims: the other takes the range over and
// records it done, and the stalled holder, coming back, learns at its
// next renewal and at its finish that the range is not its own.
func TestStalledHolder(t *testing.T) {
	srv := testserver.Start(t)
	db := srv.MustClient(t).Database("mongoferry")
	ctx := context.Background()
	ranges := []string{"app.c/000000"}
	a := New(db, Options{Task: "stall", Owner: "a", TTL: 200 * time.Millisecond})
	b := New(db, Options{Task: "stall", Owner: "b", TTL: 200 * time.Millisecond})
	la, _, err := a.Claim(ctx, ranges)
	if err != nil || la == nil {
		t.Fatalf("a's claim: %v %v", la, err)
	}
	var lb *Lease
	deadline := time.Now().Add(10 * time.Second)
	for lb == nil && time.Now().Before(deadline) {
		if lb, _, err = b.Claim(ctx, ranges); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lb == nil || !lb.TakenOver || lb.Attempt != 2 {
		t.Fatalf("b's claim: %+v, want attempt 2 taken over", lb)
	}
	if err := b.Finish(ctx, lb, 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Renew(ctx, la); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a's renewal after the takeover: %v, want ErrLeaseLost", err)
	}
	if err := a.Finish(ctx, la, 5, 0); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a's finish after the takeover: %v, want ErrLeaseLost", err)
	}
	done, err := a.Done(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := done[ranges[0]]; len(done) != 1 || r.Attempt != 2 || r.Owner != "b" {
		t.Fatalf("done records %+v, want the range once, by b's attempt 2", done)
	}
	if l, open, err := a.Claim(ctx, ranges); err != nil || l != nil || open != 0 {
		t.Fatalf("claim after done: %v, %d open, %v; want nothing left", l, open, err)
	}
}

// TestDropClearsLeases: dropping a task's checkpoint (ferry reset,
// the operator's cleanup) removes the leases and done records its
// workers wrote, and leaves another task's.
func TestDropClearsLeases(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	client := srv.MustClient(t)
	db := client.Database("mongoferry")
	for _, task := range []string{"dropped", "kept"} {
		l := New(db, Options{Task: task, Owner: "w0", TTL: time.Minute})
		for _, id := range []string{"app.c/0", "app.c/1"} {
			lease, _, err := l.Claim(ctx, []string{id})
			if err != nil || lease == nil {
				t.Fatalf("claim %s of %s: %v %v", id, task, lease, err)
			}
			if id == "app.c/0" {
				if err := l.Finish(ctx, lease, 1, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := checkpoint.NewStore(client, "mongoferry", "dropped").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	for task, want := range map[string]bool{"dropped": false, "kept": true} {
		n, err := db.Collection(Collection).CountDocuments(ctx, bson.D{{Key: "task", Value: task}})
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != want {
			t.Errorf("task %s: %d lease records after dropping task dropped", task, n)
		}
	}
}
