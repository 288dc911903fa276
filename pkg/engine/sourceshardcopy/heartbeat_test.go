package sourceshardcopy_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
)

// TestSlowCopierKeepsItsRange makes one batch of a range take three
// times the lease's TTL (a FerretDB source reading a range scans the
// whole collection; on a busy host a batch can take longer than the TTL)
// while another worker keeps trying to claim the range. The holder is
// alive, so its lease must stay renewed: the other worker claims nothing,
// and the holder copies the range and records it done, once. Without the
// heartbeat the lease was renewed only between batches, the other worker
// took the range over and read it again from its start, and the holder
// lost it after writing every document (the shared copy's stall at its
// end).
func TestSlowCopierKeepsItsRange(t *testing.T) {
	if lease, st := slowCopier(t, 0); lease != nil {
		t.Errorf("another worker took the range over (attempt %d) while its holder was slow but alive", lease.Attempt)
	} else if st.Ranges != 1 || st.Lost != 0 {
		t.Errorf("holder: %+v, want its range recorded done and none lost", st)
	}
}

// TestStuckCopierLosesItsRange: a holder that reads and writes nothing
// for longer than its StallAfter stops renewing, so another worker takes
// the range over after the TTL (a call that never returns cannot hold a
// range for ever); the stuck holder then writes nothing more of it.
func TestStuckCopierLosesItsRange(t *testing.T) {
	lease, st := slowCopier(t, 100*time.Millisecond)
	if lease == nil {
		t.Fatal("no other worker took over the range of a holder that made no progress for longer than StallAfter")
	}
	if st.Lost != 1 {
		t.Errorf("stuck holder: %+v, want its range lost once", st)
	}
}

// slowCopier copies one range whose first batch takes three lease TTLs
// while another worker tries to claim it, with the given StallAfter (the
// default when 0), and returns the other worker's lease if it got one,
// with the holder's stats.
func slowCopier(t *testing.T, stallAfter time.Duration) (*rangelease.Lease, sourceshardcopy.Stats) {
	ctx := context.Background()
	src := testserver.Start(t).MustClient(t)
	dst := testserver.Start(t).MustClient(t)
	var docs []any
	for i := range 40 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}})
	}
	if _, err := src.Database("app").Collection("c").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	meta := dst.Database("mongoferry")
	const ttl = 600 * time.Millisecond
	ranges, err := sourceshardcopy.PlanShard(ctx, src, "s0", "app.c", 0, source.Splitter{RangeDocuments: 1000})
	if err != nil || len(ranges) != 1 {
		t.Fatalf("plan: %d ranges, %v; want 1", len(ranges), err)
	}
	other := rangelease.New(meta, rangelease.Options{Task: "h", Owner: "other", TTL: ttl})
	claimed := make(chan *rangelease.Lease, 1)
	slow := true
	c := &sourceshardcopy.Copier{Shard: "s0", Source: src, NS: "app.c", Target: dst.Database("app").Collection("c"), BatchDocs: 10,
		Writer: &sink.Writer{MaxRetries: 3}, RenewEvery: ttl / 6, StallAfter: stallAfter,
		Leaser: rangelease.New(meta, rangelease.Options{Task: "h", Owner: "slow", TTL: ttl}),
		Hook: func(sourceshardcopy.Range, int) error {
			if !slow {
				return nil
			}
			slow = false
			// One batch takes 3 TTLs; the other worker looks every
			// sixth of the TTL, as a claimant polls.
			deadline := time.Now().Add(3 * ttl)
			for time.Now().Before(deadline) {
				lease, _, err := other.Claim(ctx, []string{ranges[0].ID})
				if err != nil {
					return err
				}
				if lease != nil {
					claimed <- lease
					return nil
				}
				time.Sleep(ttl / 6)
			}
			return nil
		}}
	if stallAfter > 0 {
		// The stuck holder gives the range up; stop at its first pass.
		if _, err := c.CopyClaimable(ctx, nil, ranges); err != nil {
			t.Fatal(err)
		}
	} else if err := c.Copy(ctx, nil, ranges); err != nil {
		t.Fatal(err)
	}
	var lease *rangelease.Lease
	select {
	case lease = <-claimed:
	default:
	}
	if lease == nil {
		assertSame(ctx, t, src.Database("app").Collection("c"), dst.Database("app").Collection("c"))
	}
	return lease, c.Stats()
}
