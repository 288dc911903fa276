package sharded

import (
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

func TestValidate(t *testing.T) {
	ok := flagSet{docs: defaultDocuments, shards: []int{1, 2, 3}, rounds: 1, threads: 4, batchSize: 1000, logLevel: "warn"}
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, f := range map[string]func(*flagSet){
		"too few docs":  func(f *flagSet) { f.docs = chunks - 1 },
		"no shards":     func(f *flagSet) { f.shards = nil },
		"zero shards":   func(f *flagSet) { f.shards = []int{0} },
		"no rounds":     func(f *flagSet) { f.rounds = 0 },
		"no threads":    func(f *flagSet) { f.threads = 0 },
		"no batch":      func(f *flagSet) { f.batchSize = 0 },
		"unknown level": func(f *flagSet) { f.logLevel = "loud" },
	} {
		bad := ok
		bad.shards = append([]int(nil), ok.shards...)
		f(&bad)
		if bad.validate() == nil {
			t.Errorf("%s: validate accepted %+v", name, bad)
		}
	}
}

func TestMedians(t *testing.T) {
	runs := []copyRun{
		{shards: 3, mode: config.ShardedCopyPerShard, docs: 1000, seconds: 2, planning: 1, cpu: procCPU{ferry: 0.01, router: 0.1, target: 0.05, shards: []float64{0.1, 0.1}}},
		{shards: 3, mode: config.ShardedCopyPerShard, docs: 1000, seconds: 4, planning: 1, cpu: procCPU{ferry: 0.03}},
		{shards: 3, mode: config.ShardedCopyRouter, docs: 1000, seconds: 1},
		{shards: 1, mode: config.ShardedCopyPerShard, docs: 1000, seconds: 9},
	}
	m := medians(runs, 3, config.ShardedCopyPerShard)
	if m.seconds != 3 || m.copying != 2 || m.rate != 375 {
		t.Errorf("medians = %+v, want 3 s, 2 s copying, 375 docs/s", m)
	}
	if m.ferry != 20 {
		t.Errorf("ferry µs/doc = %v, want 20", m.ferry)
	}
	if got := medians(runs, 2, config.ShardedCopyRouter); got != (median{}) {
		t.Errorf("no runs: %+v, want zero", got)
	}
	if got := runs[0].perDoc(runs[0].cpu.ours() - runs[0].cpu.ferry); got != 350 {
		t.Errorf("servers µs/doc = %v, want 350", got)
	}
}

func TestCommands(t *testing.T) {
	d := diffCommands(map[string]int64{"find": 5, "getMore": 60, "hello": 2}, map[string]int64{"find": 2, "hello": 2})
	if got, want := formatCommands(d), "find 3, getMore 60"; got != want {
		t.Errorf("formatCommands = %q, want %q", got, want)
	}
	if got := formatCommands(nil); got != "none" {
		t.Errorf("formatCommands(nil) = %q, want none", got)
	}
}
