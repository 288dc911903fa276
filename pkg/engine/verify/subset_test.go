package verify

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestFilteredNamespace: a namespace with a filter (namespaces.filters)
// verifies equal when the target holds exactly the source's matching
// documents, in every mode and in a streaming pass, and differs when it
// holds one more: a document the filter leaves out (which the replay
// should have removed when it left the filter), or a matching one the
// source does not have. The source's other documents are never asked of
// the target.
func TestFilteredNamespace(t *testing.T) {
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ctx := context.Background()
	tenants := []string{"a", "b", "c"}
	var all, subset []any
	for i := range 90 {
		d := document(int32(i), i)
		d = append(d, bson.E{Key: "tenant", Value: tenants[i%3]})
		all = append(all, d)
		if i%3 == 0 {
			subset = append(subset, d)
		}
	}
	cases := []struct {
		name    string
		extra   bson.D // on the target, beside the subset
		ok      bool
		extraID string // the streaming pass's finding
	}{
		{"exactly the subset", nil, true, ""},
		{"one document the filter leaves out", bson.D{{Key: "_id", Value: "left"}, {Key: "tenant", Value: "b"}}, false, `"left"`},
		{"one matching document the source lacks", bson.D{{Key: "_id", Value: "stray"}, {Key: "tenant", Value: "a"}}, false, `"stray"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := fmt.Sprintf("sub%d", i)
			if _, err := source.Database(db).Collection("items").InsertMany(ctx, all); err != nil {
				t.Fatal(err)
			}
			coll := target.Database(db).Collection("items")
			if _, err := coll.InsertMany(ctx, subset); err != nil {
				t.Fatal(err)
			}
			if tc.extra != nil {
				if _, err := coll.InsertOne(ctx, tc.extra); err != nil {
					t.Fatal(err)
				}
			}
			colls := list(t, source, config.Namespaces{Include: []string{db + `\..*`},
				Filters: []config.Filter{{Namespace: db + `\.items`, Query: config.Query(`{"tenant": "a"}`)}}})
			if len(colls) != 1 || colls[0].Filter == nil {
				t.Fatalf("listed %+v, want one filtered collection", colls)
			}
			for _, o := range []Options{{Mode: config.VerifyCount}, {Mode: config.VerifyHash}, {Mode: config.VerifySample, SampleSize: 1000},
				{Mode: config.VerifySample, SampleSize: 7}} {
				var mu sync.Mutex
				var total int64
				o.Progress = func(_, _ string, _, tot int64) {
					mu.Lock()
					total = max(total, tot)
					mu.Unlock()
				}
				r := result(t, run(t, source, target, colls, o), "items")
				// The whole collection's figure would overstate the subset.
				if mu.Lock(); total > int64(len(subset)+1) {
					t.Errorf("%s: progress total %d, above the subset's %d documents", o.Mode, total, len(subset))
				}
				mu.Unlock()
				if r.OK != tc.ok {
					t.Errorf("%s (sample size %d): OK = %v, want %v: %+v", o.Mode, o.SampleSize, r.OK, tc.ok, r)
				}
				if r.SourceCount != int64(len(subset)) {
					t.Errorf("%s: source count %d, want the subset's %d", o.Mode, r.SourceCount, len(subset))
				}
				if o.Mode == config.VerifyHash && !tc.ok && (r.ExtraCount != 1 || r.MissingCount+r.ChangedCount != 0) {
					t.Errorf("hash: extra %d missing %d changed %d, want one extra", r.ExtraCount, r.MissingCount, r.ChangedCount)
				}
				if o.Mode == config.VerifySample && r.Sampled != int64(min(o.SampleSize, len(subset))) {
					t.Errorf("sample: sampled %d, want %d", r.Sampled, min(o.SampleSize, len(subset)))
				}
			}

			sv := NewStreamer(source, target, StreamOptions{Positions: settledPositions{}, Rechecks: 1, MaxPendingBytes: 1 << 20, Batch: 25})
			st, err := sv.Run(ctx, colls)
			if err != nil {
				t.Fatal(err)
			}
			var want []Finding
			if tc.extraID != "" {
				want = []Finding{{Namespace: db + ".items", ID: tc.extraID, Kind: "extra"}}
			}
			if st.OK != tc.ok || st.Compared != int64(len(subset)) || fmt.Sprint(st.Findings) != fmt.Sprint(want) {
				t.Errorf("streaming pass: OK %v, compared %d, findings %+v; want %v, %d, %+v", st.OK, st.Compared, st.Findings, tc.ok, len(subset), want)
			}
		})
	}
}
