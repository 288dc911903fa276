package progress

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
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
