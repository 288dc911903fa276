package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestWorkerContract pins the worker contract: the /status document the
// engine serves (Status, as JSON) decodes into workerapi.Status, which the
// operator's controller reads, with every field of the contract carried
// over.
func TestWorkerContract(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rs := func(shard string, held int64) *replay.Status {
		return &replay.Status{AppliedTS: bson.Timestamp{T: 1772366400, I: 7}, AppliedTime: at, LagSeconds: 1.5, OpsPerSecond: 240.5,
			Shard: shard, Holds: replay.HoldStatus{HeldWrites: held, HeldNow: 2}}
	}
	// shard1's lag is not known yet: its lagSeconds is left out, and
	// reads 0 with LagUnknown set.
	unknownLag := func(s *replay.Status) *replay.Status { s.LagSeconds, s.LagUnknown = 0, replay.LagNotRead; return s }
	finished := at.Add(time.Minute)
	cutover := &workerapi.Cutover{Step: workerapi.CutoverComplete, CaughtUp: true, WritesBlocked: true,
		SourcePosition: &workerapi.Timestamp{T: 1772366460, I: 3}, TargetPosition: &workerapi.Timestamp{T: 1772366461, I: 1},
		Verify:    &workerapi.Verify{Mode: "hash", Done: 2, Total: 2, OK: true, CurrentNS: "shop.orders", Running: true, Differing: []string{"none"}},
		StartedAt: at, FinishedAt: &finished, Message: "done"}
	sharding := []workerapi.TargetSharding{{Namespace: "shop.orders", Key: "{region: 1}", Placement: "moveRange", Chunks: 4, Commands: 6,
		Notes: []string{"shop.orders: zone APAC has no shard on the target: its ranges are not assigned"}}}
	shardCutover := &workerapi.ShardCutover{CaughtUp: true, DrainPosition: &workerapi.Timestamp{T: 1795582800, I: 9}, Drained: true}
	topo := &workerapi.Topology{Sharded: true, Shards: []string{"shard0", "shard1"}, DiscoveredAt: at, AttemptedAt: at.Add(time.Minute),
		Error: "source: deployment unreachable", AwaitingShardMap: true}
	in := Status{Contract: workerapi.ContractVersion, Task: "orders", Mode: "fullAndIncremental", Phase: PhaseStreaming, Error: "a warning",
		Copy: fullsync.Status{Stage: "done", EstimatedDocuments: 1000, Documents: 990, Bytes: 99000, Percent: 100, DocsPerSecond: 12.5, BytesPerSecond: 1250,
			Ranges: 4, RangesDone: 4, Namespaces: []fullsync.NamespaceStatus{{NS: "shop.orders", Target: "shop.orders", EstimatedDocuments: 1000, Documents: 990, Percent: 100, Done: true}}},
		Replay:    rs("shard0", 5),
		Shards:    []ShardStatus{{Shard: "shard0", Phase: SubtaskStreaming, Replay: rs("shard0", 3), Error: "retrying", Cutover: shardCutover}, {Shard: "shard1", Phase: SubtaskRetired, Replay: unknownLag(rs("shard1", 4)), Error: "gone", Cutover: shardCutover}},
		Verify:    &VerifyStatus{Mode: "hash", Running: true, CurrentNS: "shop.orders", Done: 1, Total: 2, OK: false, Differing: []string{"shop.orders"}},
		StartedAt: at, TargetSharding: sharding, Cutover: cutover, Topology: topo,
		StreamingVerify: &verify.StreamStatus{Running: true, Passes: 2, StartedAt: at, FinishedAt: at.Add(time.Minute), Namespaces: 3, NamespacesDone: 1,
			CurrentNamespace: "shop.orders", Compared: 500, Rechecked: 9, Mismatches: 8, Resolved: 6, PendingRechecks: 1, PendingBytes: 120,
			MaxPendingBytes: 16 << 20, PendingFull: true, NotRechecked: 4, Unsettled: 1, Persisting: 1,
			Findings: []verify.Finding{{Namespace: "shop.orders", ID: `{"$numberInt":"7"}`, Kind: "changed"}}, OK: false, Error: "stopped"}}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got workerapi.Status
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	wr := func(shard string, held int64) *workerapi.Replay {
		return &workerapi.Replay{AppliedTS: workerapi.Timestamp{T: 1772366400, I: 7}, AppliedTime: at, LagSeconds: 1.5, OpsPerSecond: 240.5,
			Shard: shard, Holds: workerapi.Holds{HeldWrites: held, HeldNow: 2}}
	}
	wrUnknown := func(r *workerapi.Replay) *workerapi.Replay {
		r.LagSeconds, r.LagUnknown = 0, replay.LagNotRead
		return r
	}
	want := workerapi.Status{Contract: workerapi.ContractVersion, Task: "orders", Mode: "fullAndIncremental", Phase: workerapi.PhaseStreaming, Error: "a warning",
		Copy: workerapi.Copy{Stage: "done", EstimatedDocuments: 1000, Documents: 990, Bytes: 99000, Percent: 100, DocsPerSecond: 12.5, BytesPerSecond: 1250,
			Ranges: 4, RangesDone: 4, Namespaces: []workerapi.Namespace{{NS: "shop.orders", Target: "shop.orders", EstimatedDocuments: 1000, Documents: 990, Percent: 100, Done: true}}},
		Replay:    wr("shard0", 5),
		Shards:    []workerapi.Shard{{Shard: "shard0", Phase: workerapi.SubtaskStreaming, Replay: wr("shard0", 3), Error: "retrying", Cutover: shardCutover}, {Shard: "shard1", Phase: workerapi.SubtaskRetired, Replay: wrUnknown(wr("shard1", 4)), Error: "gone", Cutover: shardCutover}},
		Verify:    &workerapi.Verify{Mode: "hash", Running: true, CurrentNS: "shop.orders", Done: 1, Total: 2, OK: false, Differing: []string{"shop.orders"}},
		StartedAt: at, TargetSharding: sharding, Cutover: cutover, Topology: topo,
		StreamingVerify: &workerapi.StreamingVerify{Running: true, Passes: 2, StartedAt: at, FinishedAt: at.Add(time.Minute), Namespaces: 3, NamespacesDone: 1,
			CurrentNamespace: "shop.orders", Compared: 500, Rechecked: 9, Mismatches: 8, Resolved: 6, PendingRechecks: 1, PendingBytes: 120,
			MaxPendingBytes: 16 << 20, PendingFull: true, NotRechecked: 4, Unsettled: 1, Persisting: 1,
			Findings: []workerapi.VerifyFinding{{Namespace: "shop.orders", ID: `{"$numberInt":"7"}`, Kind: "changed"}}, OK: false, Error: "stopped"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded contract:\n%+v\nwant:\n%+v", got, want)
	}
	if n := got.ShardingNotes(); len(n) != 1 || n[0] != sharding[0].Notes[0] {
		t.Errorf("sharding notes %q", n)
	}
	if !got.Replay.LagKnown() || got.Shards[1].Replay.LagKnown() || strings.Count(string(raw), `"lagSeconds"`) != 2 {
		t.Errorf("lag known %v and %v, %d lagSeconds in %s; want shard1's lag unknown and left out",
			got.Replay.LagKnown(), got.Shards[1].Replay.LagKnown(), strings.Count(string(raw), `"lagSeconds"`), raw)
	}
	if n := got.HeldWrites(); n != 7 {
		t.Errorf("held writes %d, want the shards' 7", n)
	}
	// Every field of the contract is set above: a field added to
	// workerapi.Status without a source here shows up as a zero value.
	assertNoZeroFields(t, reflect.ValueOf(want), "Status")
}

// assertNoZeroFields fails on a zero-valued field of v (recursively), so
// the round trip above covers every field of the contract.
func assertNoZeroFields(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			t.Errorf("%s is not covered by the contract test", path)
			return
		}
		assertNoZeroFields(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			if v.Interface().(time.Time).IsZero() {
				t.Errorf("%s is not covered by the contract test", path)
			}
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Name == "OK" || f.Name == "Running" || f.Name == "Done" && f.Type.Kind() == reflect.Bool {
				continue // booleans: both values are meaningful
			}
			if f.Name == "LagSeconds" || f.Name == "LagUnknown" {
				continue // one of the two is set: shard1's lag is unknown, the others' known
			}
			assertNoZeroFields(t, v.Field(i), path+"."+f.Name)
		}
	case reflect.Slice:
		if v.Len() == 0 {
			t.Errorf("%s is not covered by the contract test", path)
		}
		for i := range v.Len() {
			assertNoZeroFields(t, v.Index(i), path)
		}
	default:
		if v.IsZero() {
			t.Errorf("%s is not covered by the contract test", path)
		}
	}
}
