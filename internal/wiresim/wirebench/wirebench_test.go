package wirebench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
)

// TestRunReplaysEveryEntry replays a small generated oplog over the wire
// with the real tailer and replayer: the target acknowledges exactly the
// writes the entries translate to and the checkpoint reaches the last
// entry (Run checks both).
func TestRunReplaysEveryEntry(t *testing.T) {
	for _, tc := range []struct {
		shape   replaybench.Shape
		ops     int64
		writers int
		delay   time.Duration
	}{
		{replaybench.ShapeDDT, 7000, 4, 0},
		{replaybench.ShapeDDT, 7000, 16, time.Millisecond},
		{replaybench.ShapeYCSB, 7000, 4, 500 * time.Microsecond},
		// An entry is a batch of 64 inserts here.
		{replaybench.ShapeInsertMany, 300, 4, 0},
	} {
		t.Run(fmt.Sprintf("%s/%d writers/%s", tc.shape, tc.writers, tc.delay), func(t *testing.T) {
			in, err := replaybench.Generate(tc.shape, 3000, replaybench.Mix{}, 1)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := Run(ctx, in, Config{Ops: tc.ops, Writers: tc.writers, Delay: tc.delay})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d ops in %s: %.0f ops/s, %.1f writes/command, %s CPU/op", res.Ops, res.Elapsed, res.OpsPerSecond(), res.WritesPerCommand(), res.CPUPerOp())
		})
	}
}

// BenchmarkWireReplay replays b.N entries of the DDT shape over the wire
// (16 writers), with no delay and with 1ms per write command. It leaves
// out the servers' own work: the target acknowledges without storing.
func BenchmarkWireReplay(b *testing.B) {
	in, err := replaybench.Generate(replaybench.ShapeDDT, replaybench.DefaultPool, replaybench.Mix{}, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, delay := range []time.Duration{0, time.Millisecond} {
		b.Run("ddt/16writers/delay="+delay.String(), func(b *testing.B) {
			// One round of b.N entries: a round's set-up (two servers,
			// connections) is not per entry.
			res, err := Run(context.Background(), in, Config{Ops: max(int64(b.N), 1000), Writers: 16, Delay: delay})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(res.Elapsed.Nanoseconds())/float64(res.Ops), "wall-ns/entry")
			b.ReportMetric(res.OpsPerSecond(), "ops/s")
			b.ReportMetric(res.WritesPerCommand(), "writes/command")
			b.ReportMetric(float64(res.CPUPerOp().Nanoseconds()), "cpu-ns/op")
		})
	}
}
