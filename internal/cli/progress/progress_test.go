package progress

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// TestLagUnknownShown: while replay's lag is unknown, the progress bar and
// log lines say so instead of "lag 0s" (caught up); a known lag, 0
// included, shows as a number.
func TestLagUnknownShown(t *testing.T) {
	streaming := func(r replay.Status) engine.Status {
		return engine.Status{Phase: engine.PhaseStreaming, Replay: &r,
			Shards: []engine.ShardStatus{{Shard: "rs0", Phase: engine.SubtaskStreaming, Replay: &r}}}
	}
	for _, tc := range []struct {
		name       string
		r          replay.Status
		bar, log   string
		notInLines string
	}{
		{"unknown", replay.Status{LagUnknown: replay.LagNotRead}, "lag unknown", `lag=unknown lagUnknown="the source's newest position is not read yet"`, "lag 0s"},
		{"caught up", replay.Status{NewestKnown: true}, "lag 0s", "lagSeconds=0", "unknown"},
		{"behind", replay.Status{NewestKnown: true, LagSeconds: 82}, "lag 82s", "lagSeconds=82", "unknown"},
	} {
		bar := barLine(streaming(tc.r))
		var buf bytes.Buffer
		logProgress(slog.New(slog.NewTextHandler(&buf, nil)), streaming(tc.r))
		if !strings.Contains(bar, tc.bar) || strings.Contains(bar, tc.notInLines) {
			t.Errorf("%s: bar %q, want %q", tc.name, bar, tc.bar)
		}
		if strings.Count(buf.String(), tc.log) != 2 || strings.Contains(buf.String(), "lagSeconds=0 ") && tc.name == "unknown" {
			t.Errorf("%s: log lines\n%s\nwant %q in the task's and the shard's", tc.name, buf.String(), tc.log)
		}
	}
}

// TestVerifyLine: ferry verify's progress line counts a 20,000-document
// collection as 20,000 documents in each pass (it read "of about 40000",
// then "80000"), and says which pass it is in.
func TestVerifyLine(t *testing.T) {
	ns := catalog.Namespace{DB: "shop", Coll: "orders"}
	l := NewLine(io.Discard, []catalog.Collection{{Source: ns, Target: ns}}, config.VerifyHash)
	l.Update("shop.orders", verify.PassHash, 12000, 20000)
	l.Update("shop.orders", verify.PassHash, 11000, 20000) // a report from the other side, a little late
	if got, want := l.text(3*time.Second), "verify: shop.orders (1 of 1): hashing source and target: 12000 of about 20000 documents, 3s elapsed\n"; got != want {
		t.Errorf("hash pass:\n%q\nwant\n%q", got, want)
	}
	l.Update("shop.orders", verify.PassDiff, 500, 20000)
	if got, want := l.text(9*time.Second), "verify: shop.orders (1 of 1): the hashes differ; reading both sides again to list the documents that differ: 500 of about 20000 documents, 9s elapsed\n"; got != want {
		t.Errorf("diff pass:\n%q\nwant\n%q", got, want)
	}
}
