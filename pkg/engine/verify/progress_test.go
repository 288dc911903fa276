package verify

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// TestProgressCountsTheCollection: a hash verification of a 3,000-document
// collection reports its passes in the collection's documents, both sides
// read counting once: the hash pass ends at 3,000 of about 3,000 (it read
// "of about 6000", then 12,000 once the hashes differed), and the pass
// that lists the differences starts again at 0, of about 3,000.
func TestProgressCountsTheCollection(t *testing.T) {
	const n = 3000
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ns := catalog.Namespace{DB: "app", Coll: "orders"}
	ids := make([]any, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	seed(t, ns, ids, source, target)
	if _, err := target.Database("app").Collection("orders").UpdateOne(context.Background(), bson.D{{Key: "_id", Value: int32(7)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "changed"}}}}); err != nil {
		t.Fatal(err)
	}
	type seen struct{ maxDone, maxTotal, calls int64 }
	var mu sync.Mutex
	passes := map[string]*seen{}
	var order []string
	rep := run(t, source, target, list(t, source, config.Namespaces{}), Options{Mode: config.VerifyHash, Progress: func(_ string, pass string, done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		s := passes[pass]
		if s == nil {
			s = &seen{}
			passes[pass] = s
			order = append(order, pass)
		}
		s.maxDone, s.maxTotal, s.calls = max(s.maxDone, done), max(s.maxTotal, total), s.calls+1
	}})
	if rep.OK() {
		t.Fatal("verification found no difference")
	}
	for _, pass := range []string{PassHash, PassDiff} {
		s := passes[pass]
		if s == nil {
			t.Errorf("no progress for pass %s (passes %v)", pass, order)
			continue
		}
		if s.maxDone != n || s.maxTotal > n || s.maxTotal < n-1 {
			t.Errorf("pass %s: up to %d of about %d documents, want %d of about %d", pass, s.maxDone, s.maxTotal, n, n)
		}
	}
	t.Logf("passes %v: hash %+v, diff %+v", order, *passes[PassHash], *passes[PassDiff])
}
