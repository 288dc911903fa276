package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestShardMetrics checks the per-shard series of a sharded source.
func TestShardMetrics(t *testing.T) {
	status := engine.Status{Task: "t1", Phase: engine.PhaseStreaming, Shards: []engine.ShardStatus{
		{Shard: "rs0", Phase: engine.SubtaskStreaming, Replay: &replay.Status{
			AppliedTS: bson.Timestamp{T: 1700000000}, ReadTS: bson.Timestamp{T: 1700000003}, LagSeconds: 4, OpsPerSecond: 12,
			Applied: map[string]int64{"update": 7}, Skipped: map[string]int64{"fromMigrate": 3}}},
		{Shard: "rs1", Phase: engine.SubtaskPending},
	}}
	c := NewCollector(func() engine.Status { return status })
	want := `
# HELP mongoferry_shard_replay_lag_seconds Seconds between a shard's newest oplog entry and its subtask's applied checkpoint.
# TYPE mongoferry_shard_replay_lag_seconds gauge
mongoferry_shard_replay_lag_seconds{shard="rs0",task="t1"} 4
# HELP mongoferry_shard_replay_skipped_entries_total Oplog entries a shard subtask skipped, by reason (fromMigrate: chunk migrations).
# TYPE mongoferry_shard_replay_skipped_entries_total counter
mongoferry_shard_replay_skipped_entries_total{reason="fromMigrate",shard="rs0",task="t1"} 3
# HELP mongoferry_shard_replay_checkpoint_timestamp_seconds Source time (Unix seconds) of a shard subtask's applied checkpoint.
# TYPE mongoferry_shard_replay_checkpoint_timestamp_seconds gauge
mongoferry_shard_replay_checkpoint_timestamp_seconds{shard="rs0",task="t1"} 1.7e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"mongoferry_shard_replay_lag_seconds", "mongoferry_shard_replay_skipped_entries_total", "mongoferry_shard_replay_checkpoint_timestamp_seconds"); err != nil {
		t.Error(err)
	}
	phases := `
# HELP mongoferry_shard_phase 1 for a shard subtask's current phase (Pending, Streaming, Retiring, Retired, Failed), 0 for the others.
# TYPE mongoferry_shard_phase gauge
mongoferry_shard_phase{phase="Failed",shard="rs0",task="t1"} 0
mongoferry_shard_phase{phase="Failed",shard="rs1",task="t1"} 0
mongoferry_shard_phase{phase="Pending",shard="rs0",task="t1"} 0
mongoferry_shard_phase{phase="Pending",shard="rs1",task="t1"} 1
mongoferry_shard_phase{phase="Retired",shard="rs0",task="t1"} 0
mongoferry_shard_phase{phase="Retired",shard="rs1",task="t1"} 0
mongoferry_shard_phase{phase="Retiring",shard="rs0",task="t1"} 0
mongoferry_shard_phase{phase="Retiring",shard="rs1",task="t1"} 0
mongoferry_shard_phase{phase="Streaming",shard="rs0",task="t1"} 1
mongoferry_shard_phase{phase="Streaming",shard="rs1",task="t1"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(phases), "mongoferry_shard_phase"); err != nil {
		t.Error(err)
	}
}

// TestOplogWindowMetrics: each watched oplog's span, and its headroom
// when there is one.
func TestOplogWindowMetrics(t *testing.T) {
	headroom := -12.0
	status := engine.Status{Task: "t1", Phase: engine.PhaseStreaming, OplogWindows: []engine.OplogWindow{
		{Shard: "rs0", SpanSeconds: 3600, HeadroomSeconds: &headroom},
		{Shard: "rs1", SpanSeconds: 60},
	}}
	c := NewCollector(func() engine.Status { return status })
	want := `
# HELP mongoferry_source_oplog_headroom_seconds Seconds between the oldest entry a source oplog holds and the task's checkpoint on it (where a restart resumes); negative once the window is lost.
# TYPE mongoferry_source_oplog_headroom_seconds gauge
mongoferry_source_oplog_headroom_seconds{shard="rs0",task="t1"} -12
# HELP mongoferry_source_oplog_span_seconds Seconds between the oldest and the newest entry a source oplog holds.
# TYPE mongoferry_source_oplog_span_seconds gauge
mongoferry_source_oplog_span_seconds{shard="rs0",task="t1"} 3600
mongoferry_source_oplog_span_seconds{shard="rs1",task="t1"} 60
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"mongoferry_source_oplog_headroom_seconds", "mongoferry_source_oplog_span_seconds"); err != nil {
		t.Error(err)
	}
}

// TestWriteCommandMetrics checks the replay's command counters: their
// ratio is the writes per command /status shows.
func TestWriteCommandMetrics(t *testing.T) {
	status := engine.Status{Task: "t1", Phase: engine.PhaseStreaming, Replay: &replay.Status{
		WriteCommands: map[string]int64{"insert": 4, "delete": 1},
		WritesSent:    map[string]int64{"insert": 200, "delete": 3},
	}}
	c := NewCollector(func() engine.Status { return status })
	want := `
# HELP mongoferry_replay_write_commands_total Write commands replay sent to the target, by kind (insert, update, delete, bulkWrite).
# TYPE mongoferry_replay_write_commands_total counter
mongoferry_replay_write_commands_total{kind="delete",task="t1"} 1
mongoferry_replay_write_commands_total{kind="insert",task="t1"} 4
# HELP mongoferry_replay_writes_sent_total Writes carried by the commands replay sent to the target, by command kind.
# TYPE mongoferry_replay_writes_sent_total counter
mongoferry_replay_writes_sent_total{kind="delete",task="t1"} 3
mongoferry_replay_writes_sent_total{kind="insert",task="t1"} 200
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"mongoferry_replay_write_commands_total", "mongoferry_replay_writes_sent_total"); err != nil {
		t.Error(err)
	}
}

// TestStreamingVerifyMetrics: a finished pass that found one persisting
// mismatch and could not recheck two.
func TestStreamingVerifyMetrics(t *testing.T) {
	status := engine.Status{Task: "t1", Phase: engine.PhaseStreaming, StreamingVerify: &verify.StreamStatus{
		Passes: 3, Compared: 641, PendingRechecks: 0, PendingBytes: 0, MaxPendingBytes: 16 << 20, Persisting: 1, NotRechecked: 1, Unsettled: 1,
		Findings: []verify.Finding{{Namespace: "shop.items", ID: `{"$numberInt":"500"}`, Kind: "changed"}}}}
	c := NewCollector(func() engine.Status { return status })
	want := `
# HELP mongoferry_verify_streaming_documents Documents the current (or last) streaming verification pass compared.
# TYPE mongoferry_verify_streaming_documents gauge
mongoferry_verify_streaming_documents{task="t1"} 641
# HELP mongoferry_verify_streaming_not_rechecked Mismatches of the current (or last) pass not rechecked: the recheck budget was full, or replay did not pass them before the pass ended.
# TYPE mongoferry_verify_streaming_not_rechecked gauge
mongoferry_verify_streaming_not_rechecked{task="t1"} 2
# HELP mongoferry_verify_streaming_ok 1 when the last finished streaming verification pass matched, 0 when it did not.
# TYPE mongoferry_verify_streaming_ok gauge
mongoferry_verify_streaming_ok{task="t1"} 0
# HELP mongoferry_verify_streaming_passes_total Streaming verification passes finished.
# TYPE mongoferry_verify_streaming_passes_total counter
mongoferry_verify_streaming_passes_total{task="t1"} 3
# HELP mongoferry_verify_streaming_persisting Mismatches of the current (or last) pass that persisted through every recheck.
# TYPE mongoferry_verify_streaming_persisting gauge
mongoferry_verify_streaming_persisting{task="t1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "mongoferry_verify_streaming_documents", "mongoferry_verify_streaming_not_rechecked",
		"mongoferry_verify_streaming_ok", "mongoferry_verify_streaming_passes_total", "mongoferry_verify_streaming_persisting"); err != nil {
		t.Error(err)
	}
}

// TestCutoverMetrics: a cut-over draining with the source's writes
// blocked shows as one step at 1 and the block at 1; a task with no
// cut-over requested has neither series.
func TestCutoverMetrics(t *testing.T) {
	status := engine.Status{Task: "t1", Phase: engine.PhaseStreaming,
		Cutover: &workerapi.Cutover{Step: workerapi.CutoverDraining, CaughtUp: true, WritesBlocked: true}}
	c := NewCollector(func() engine.Status { return status })
	want := `
# HELP mongoferry_cutover_source_writes_blocked 1 once the cut-over has blocked the application's writes on the source (they stay blocked after it), 0 otherwise.
# TYPE mongoferry_cutover_source_writes_blocked gauge
mongoferry_cutover_source_writes_blocked{task="t1"} 1
# HELP mongoferry_cutover_step 1 for the step a requested cut-over is at, 0 for the others.
# TYPE mongoferry_cutover_step gauge
mongoferry_cutover_step{step="BlockingWrites",task="t1"} 0
mongoferry_cutover_step{step="CatchingUp",task="t1"} 0
mongoferry_cutover_step{step="Complete",task="t1"} 0
mongoferry_cutover_step{step="Draining",task="t1"} 1
mongoferry_cutover_step{step="Failed",task="t1"} 0
mongoferry_cutover_step{step="Finalizing",task="t1"} 0
mongoferry_cutover_step{step="Verifying",task="t1"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "mongoferry_cutover_step", "mongoferry_cutover_source_writes_blocked"); err != nil {
		t.Error(err)
	}
	status.Cutover = nil
	if n := testutil.CollectAndCount(c, "mongoferry_cutover_step", "mongoferry_cutover_source_writes_blocked"); n != 0 {
		t.Errorf("%d cut-over series before a cut-over was requested, want none", n)
	}
}

// TestLagUnknownAbsent: while replay's lag is unknown the lag gauges are
// absent, not 0 (which reads as caught up, and would keep a lag alert
// quiet); a known lag of 0 is exported.
func TestLagUnknownAbsent(t *testing.T) {
	lagSeries := []string{"mongoferry_replay_lag_seconds", "mongoferry_shard_replay_lag_seconds"}
	status := func(r replay.Status) engine.Status {
		return engine.Status{Task: "t1", Phase: engine.PhaseStreaming, Replay: &r,
			Shards: []engine.ShardStatus{{Shard: "rs0", Phase: engine.SubtaskStreaming, Replay: &r}}}
	}
	unknown := status(replay.Status{LagUnknown: replay.LagNotRead})
	if n := testutil.CollectAndCount(NewCollector(func() engine.Status { return unknown }), lagSeries...); n != 0 {
		t.Errorf("unknown lag: %d lag series, want none", n)
	}
	caughtUp := status(replay.Status{NewestKnown: true})
	want := `
# HELP mongoferry_replay_lag_seconds Seconds between the source's newest oplog entry and the applied checkpoint.
# TYPE mongoferry_replay_lag_seconds gauge
mongoferry_replay_lag_seconds{task="t1"} 0
# HELP mongoferry_shard_replay_lag_seconds Seconds between a shard's newest oplog entry and its subtask's applied checkpoint.
# TYPE mongoferry_shard_replay_lag_seconds gauge
mongoferry_shard_replay_lag_seconds{shard="rs0",task="t1"} 0
`
	if err := testutil.CollectAndCompare(NewCollector(func() engine.Status { return caughtUp }), strings.NewReader(want), lagSeries...); err != nil {
		t.Error(err)
	}
}
