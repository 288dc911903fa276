package replay_test

import (
	"context"
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
)

// BenchmarkReplay replays b.N synthetic oplog entries (60% inserts, 30%
// $v:2 updates of one field, 10% deletes) of each shape through the real
// pipeline into a sink that encodes every write as the driver would and
// discards it. Run with -benchmem; `ferry bench replay` reports the same
// figures with the peak RSS.
//
//	go test ./pkg/engine/replay/ -run '^$' -bench Replay -benchmem
func BenchmarkReplay(b *testing.B) {
	for _, shape := range replaybench.Shapes {
		b.Run(string(shape), func(b *testing.B) {
			in, err := replaybench.Generate(shape, min(b.N, replaybench.DefaultPool), replaybench.Mix{}, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(in.EntryBytes()))
			b.ResetTimer()
			res, err := replaybench.Run(context.Background(), in, replaybench.Config{Ops: int64(b.N)})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.OpsPerSecond(), "ops/s")
		})
	}
}
