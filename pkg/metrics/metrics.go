// Package metrics exposes a task's state to Prometheus: a collector that
// reads the engine's Status snapshot at scrape time (one source of truth
// for /status, metrics and progress output), the write-latency histogram
// observed on the hot path, and /metrics (HTTPHandler; the worker's other
// endpoints are workerapi.Handler's).
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Phases lists every phase, so each gets a 0/1 series.
var Phases = []engine.Phase{engine.PhasePending, engine.PhaseFullSync, engine.PhaseStreaming,
	engine.PhaseVerifying, engine.PhaseCompleted, engine.PhaseFailed}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("mongoferry_"+name, help, append([]string{"task"}, labels...), nil)
}

var (
	phaseDesc          = desc("task_phase", "1 for the task's current phase, 0 for the others.", "phase")
	copyDocsDesc       = desc("copy_documents_total", "Documents copied to the target by the full copy.")
	copyBytesDesc      = desc("copy_bytes_total", "Bytes of documents copied to the target by the full copy.")
	copyEstimatedDesc  = desc("copy_estimated_documents", "Source documents the full copy expects to copy.")
	copyRatioDesc      = desc("copy_progress_ratio", "Full copy progress from 0 to 1.")
	copyNSRatioDesc    = desc("copy_namespace_progress_ratio", "Full copy progress of one namespace from 0 to 1.", "namespace")
	copyRangesDesc     = desc("copy_ranges", "Copy ranges planned.")
	copyRangesDoneDesc = desc("copy_ranges_done", "Copy ranges finished.")
	conflictsDesc      = desc("copy_conflicts_total", "Documents that already existed on the target, by what was done.", "action")
	retriesDesc        = desc("write_retries_total", "Write batches retried after a retryable error.")
	bufferedDesc       = desc("cache_buffered_bytes", "Bytes of documents buffered between readers and writers.")
	maxBytesDesc       = desc("cache_max_bytes", "Byte budget of the copy's queue between readers and writers: cache.maxBytes less one batch per reader and per writer.")
	lagDesc            = desc("replay_lag_seconds", "Seconds between the source's newest oplog entry and the applied checkpoint.")
	appliedDesc        = desc("replay_applied_ops_total", "Oplog operations applied to the target, by operation.", "op")
	skippedDesc        = desc("replay_skipped_entries_total", "Oplog entries skipped, by reason.", "reason")
	replayRateDesc     = desc("replay_ops_per_second", "Oplog operations applied per second over the last 10 seconds.")
	replayBufDesc      = desc("replay_buffered_bytes", "Bytes of oplog entries read and not yet applied.")
	checkpointDesc     = desc("replay_checkpoint_timestamp_seconds", "Source time (Unix seconds) of the replay checkpoint.")
	conflictsTolDesc   = desc("replay_tolerated_conflicts_total", "Duplicate keys stepped over in the copy/replay overlap.")
	writeCmdsDesc      = desc("replay_write_commands_total", "Write commands replay sent to the target, by kind (insert, update, delete, bulkWrite).", "kind")
	writesSentDesc     = desc("replay_writes_sent_total", "Writes carried by the commands replay sent to the target, by command kind.", "kind")
	heldDesc           = desc("replay_held_writes_total", "Writes a shard's subtask held after chunk migrations until the other subtasks had applied up to them.", "shard")
	heldNowDesc        = desc("replay_held_writes", "Writes a shard's subtask holds at the moment.", "shard")
	holdSecondsDesc    = desc("replay_hold_seconds_total", "Time namespaces spent held after chunk migrations, summed.", "shard")
	commitWaitsDesc    = desc("replay_commit_waits_total", "Multi-shard transaction parts that waited for the other subtasks.", "shard")
	commitWaitsAllDesc = desc("replay_commit_waits_all_total", "Commit waits that waited for every subtask because the coordinator's decision (its participants) was not on the board.", "shard")
	idConflictsDesc    = desc("replay_id_conflicts_total", "Writes of a shard's subtask that met a document with their _id and another shard-key value on the target.", "shard")
	idWaitsDesc        = desc("replay_id_conflict_waits_total", "Of those, the writes that waited for the other subtasks before going again.", "shard")
	idWaitSecondsDesc  = desc("replay_id_conflict_wait_seconds_total", "Time writes spent waiting for the other subtasks after meeting a document with their _id, summed.", "shard")
	idSteppedDesc      = desc("replay_id_conflicts_stepped_over_total", "Writes stepped over because the document with their _id was still there after the wait and the source holds none.", "shard")
	idReReadDesc       = desc("replay_id_conflicts_reread_total", "Writes that still met a document with their _id after the wait while the source holds one: the target's document is replaced by the source's.", "shard")
	idRecheckedDesc    = desc("replay_id_rechecks_total", "Documents written from the source after such a conflict that were read from the source again once every subtask had passed the read.", "shard")
	idRechecksDesc     = desc("replay_id_rechecks_pending", "Documents written from the source after such a conflict still to be read again once every subtask passes the read; a subtask is caught up only at 0.", "shard")
	shardPhaseDesc     = desc("shard_phase", "1 for a shard subtask's current phase (Pending, Streaming, Retiring, Retired, Failed), 0 for the others.", "shard", "phase")
	shardLagDesc       = desc("shard_replay_lag_seconds", "Seconds between a shard's newest oplog entry and its subtask's applied checkpoint.", "shard")
	shardAppliedTSDesc = desc("shard_replay_checkpoint_timestamp_seconds", "Source time (Unix seconds) of a shard subtask's applied checkpoint.", "shard")
	shardReadTSDesc    = desc("shard_replay_read_timestamp_seconds", "Source time (Unix seconds) of the last entry a shard subtask read.", "shard")
	shardRateDesc      = desc("shard_replay_ops_per_second", "Oplog operations a shard subtask applied per second over the last 10 seconds.", "shard")
	shardAppliedDesc   = desc("shard_replay_applied_ops_total", "Oplog operations a shard subtask applied, by operation.", "shard", "op")
	shardSkippedDesc   = desc("shard_replay_skipped_entries_total", "Oplog entries a shard subtask skipped, by reason (fromMigrate: chunk migrations).", "shard", "reason")
	headroomDesc       = desc("source_oplog_headroom_seconds", "Seconds between the oldest entry a source oplog holds and the task's checkpoint on it (where a restart resumes); negative once the window is lost.", "shard")
	spanDesc           = desc("source_oplog_span_seconds", "Seconds between the oldest and the newest entry a source oplog holds.", "shard")
	reopensDesc        = desc("source_oplog_reopens_total", "Queries that opened a cursor on the source's oplog: the first, then re-opens after a cursor died, failed or went quiet, or polls of a server read by re-running its query.")
	newestReadsDesc    = desc("source_oplog_newest_reads_total", "Queries for the source oplog's newest position (for lag).")
	lateEntriesDesc    = desc("source_oplog_late_entries_total", "Oplog entries that became visible after later ones had been read; replay re-reads their documents from the source.")
	planningDesc       = desc("startup_seconds", "Seconds from the task's start to its first copied document (or to replay, without a copy): connecting, recording the start position and planning.")
	verifyOKDesc       = desc("verify_ok", "1 when the last verification matched, 0 when it found differences.")
	verifyDiffDesc     = desc("verify_differing_namespaces", "Namespaces whose target differs from the source at the last verification.")

	svRunningDesc      = desc("verify_streaming_running", "1 while a streaming verification pass runs.")
	svPassesDesc       = desc("verify_streaming_passes_total", "Streaming verification passes finished.")
	svDocsDesc         = desc("verify_streaming_documents", "Documents the current (or last) streaming verification pass compared.")
	svPendingDesc      = desc("verify_streaming_pending_rechecks", "Mismatches waiting for replay to pass their source position before a recheck.")
	svPendingBytes     = desc("verify_streaming_pending_bytes", "Bytes of the mismatches waiting for a recheck.")
	svMaxPending       = desc("verify_streaming_max_pending_bytes", "Byte budget of the mismatches waiting for a recheck (verify.maxPendingBytes).")
	svPersistingDesc   = desc("verify_streaming_persisting", "Mismatches of the current (or last) pass that persisted through every recheck.")
	svNotRechecked     = desc("verify_streaming_not_rechecked", "Mismatches of the current (or last) pass not rechecked: the recheck budget was full, or replay did not pass them before the pass ended.")
	svOKDesc           = desc("verify_streaming_ok", "1 when the last finished streaming verification pass matched, 0 when it did not.")
	cutoverStepDesc    = desc("cutover_step", "1 for the step a requested cut-over is at, 0 for the others.", "step")
	cutoverBlockedDesc = desc("cutover_source_writes_blocked", "1 once the cut-over has blocked the application's writes on the source (they stay blocked after it), 0 otherwise.")
)

// Collector turns a task's Status into metrics at scrape time.
type Collector struct {
	status func() engine.Status
}

// NewCollector reads status on every scrape.
func NewCollector(status func() engine.Status) *Collector { return &Collector{status: status} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseDesc, copyDocsDesc, copyBytesDesc, copyEstimatedDesc, copyRatioDesc,
		copyNSRatioDesc, copyRangesDesc, copyRangesDoneDesc, conflictsDesc, retriesDesc, bufferedDesc, maxBytesDesc,
		verifyOKDesc, verifyDiffDesc, lagDesc, appliedDesc, skippedDesc, replayRateDesc, replayBufDesc, checkpointDesc, conflictsTolDesc,
		writeCmdsDesc, writesSentDesc,
		heldDesc, heldNowDesc, holdSecondsDesc, commitWaitsDesc, commitWaitsAllDesc, reopensDesc, newestReadsDesc, lateEntriesDesc, planningDesc,
		idConflictsDesc, idWaitsDesc, idWaitSecondsDesc, idSteppedDesc, idReReadDesc, idRecheckedDesc, idRechecksDesc,

		shardPhaseDesc, shardLagDesc, shardAppliedTSDesc, shardReadTSDesc, shardRateDesc, shardAppliedDesc, shardSkippedDesc,
		headroomDesc, spanDesc,
		svRunningDesc, svPassesDesc, svDocsDesc, svPendingDesc, svPendingBytes, svMaxPending, svPersistingDesc, svNotRechecked, svOKDesc,
		cutoverStepDesc, cutoverBlockedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	e := emitter{ch: ch, task: s.Task}
	for _, p := range Phases {
		e.gauge(phaseDesc, oneIf(s.Phase == p), string(p))
	}
	if s.StartupSeconds > 0 {
		e.gauge(planningDesc, s.StartupSeconds)
	}
	e.emitCopy(s.Copy)
	if s.Replay != nil {
		e.emitReplay(s.Replay)
	}
	if src := s.Source; src != nil {
		e.counter(reopensDesc, float64(src.Reopens))
		e.counter(newestReadsDesc, float64(src.NewestReads))
		e.counter(lateEntriesDesc, float64(src.LateEntries))
	}
	for _, sh := range s.Shards {
		e.emitShard(sh)
	}
	for _, w := range s.OplogWindows {
		e.gauge(spanDesc, w.SpanSeconds, w.Shard)
		if w.HeadroomSeconds != nil {
			e.gauge(headroomDesc, *w.HeadroomSeconds, w.Shard)
		}
	}
	e.emitVerify(s.Verify, s.StreamingVerify)
	if co := s.Cutover; co != nil {
		for _, step := range workerapi.CutoverSteps {
			e.gauge(cutoverStepDesc, oneIf(co.Step == step), step)
		}
		e.gauge(cutoverStepDesc, oneIf(co.Step == workerapi.CutoverFailed), workerapi.CutoverFailed)
		e.gauge(cutoverBlockedDesc, oneIf(co.WritesBlocked))
	}
}

// emitter sends one scrape's metrics, each labelled with the task's name
// first.
type emitter struct {
	ch   chan<- prometheus.Metric
	task string
}

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{e.task}, labels...)...)
}

func (e emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{e.task}, labels...)...)
}

// emitCopy emits the full copy's progress, conflicts and queue.
func (e emitter) emitCopy(c fullsync.Status) {
	e.counter(copyDocsDesc, float64(c.Documents))
	e.counter(copyBytesDesc, float64(c.Bytes))
	e.gauge(copyEstimatedDesc, float64(c.EstimatedDocuments))
	e.gauge(copyRatioDesc, c.Percent/100)
	for _, n := range c.Namespaces {
		e.gauge(copyNSRatioDesc, n.Percent/100, n.NS)
	}
	e.gauge(copyRangesDesc, float64(c.Ranges))
	e.gauge(copyRangesDoneDesc, float64(c.RangesDone))
	e.counter(conflictsDesc, float64(c.Overwritten), "overwritten")
	e.counter(conflictsDesc, float64(c.Skipped), "skipped")
	e.counter(retriesDesc, float64(c.Retries))
	e.gauge(bufferedDesc, float64(c.BufferedBytes))
	e.gauge(maxBytesDesc, float64(c.QueueBudgetBytes))
}

// emitReplay emits the whole task's replay: lag (absent while unknown: a 0
// would read as caught up), applied and skipped entries, rate, buffer,
// checkpoint and write commands.
func (e emitter) emitReplay(r *replay.Status) {
	if r.LagKnown() {
		e.gauge(lagDesc, r.LagSeconds)
	}
	for op, n := range r.Applied {
		e.counter(appliedDesc, float64(n), op)
	}
	for reason, n := range r.Skipped {
		e.counter(skippedDesc, float64(n), reason)
	}
	e.gauge(replayRateDesc, r.OpsPerSecond)
	e.gauge(replayBufDesc, float64(r.BufferedBytes))
	e.gauge(checkpointDesc, float64(r.AppliedTS.T))
	e.counter(conflictsTolDesc, float64(r.ToleratedConflicts))
	for kind, n := range r.WriteCommands {
		e.counter(writeCmdsDesc, float64(n), kind)
		e.counter(writesSentDesc, float64(r.WritesSent[kind]), kind)
	}
}

// emitShard emits one source shard's subtask: its phase and, once it
// replays, its positions, rate and held writes.
func (e emitter) emitShard(sh engine.ShardStatus) {
	for _, p := range []string{engine.SubtaskPending, engine.SubtaskStreaming, engine.SubtaskRetiring, engine.SubtaskRetired, engine.SubtaskFailed} {
		e.gauge(shardPhaseDesc, oneIf(sh.Phase == p), sh.Shard, p)
	}
	r := sh.Replay
	if r == nil {
		return
	}
	if r.LagKnown() {
		e.gauge(shardLagDesc, r.LagSeconds, sh.Shard)
	}
	e.gauge(shardAppliedTSDesc, float64(r.AppliedTS.T), sh.Shard)
	e.gauge(shardReadTSDesc, float64(r.ReadTS.T), sh.Shard)
	e.gauge(shardRateDesc, r.OpsPerSecond, sh.Shard)
	e.counter(heldDesc, float64(r.Holds.HeldWrites), sh.Shard)
	e.gauge(heldNowDesc, float64(r.Holds.HeldNow), sh.Shard)
	e.counter(holdSecondsDesc, r.Holds.HoldSeconds, sh.Shard)
	e.counter(commitWaitsDesc, float64(r.Holds.CommitWaits), sh.Shard)
	e.counter(commitWaitsAllDesc, float64(r.Holds.CommitWaitsAll), sh.Shard)
	e.counter(idConflictsDesc, float64(r.Holds.Conflicts), sh.Shard)
	e.counter(idWaitsDesc, float64(r.Holds.ConflictWaits), sh.Shard)
	e.counter(idWaitSecondsDesc, r.Holds.ConflictWaitSeconds, sh.Shard)
	e.counter(idSteppedDesc, float64(r.Holds.SteppedOver), sh.Shard)
	e.counter(idReReadDesc, float64(r.Holds.ConflictsReRead), sh.Shard)
	e.counter(idRecheckedDesc, float64(r.Holds.Rechecked), sh.Shard)
	e.gauge(idRechecksDesc, float64(r.Holds.Rechecks), sh.Shard)
	for op, n := range r.Applied {
		e.counter(shardAppliedDesc, float64(n), sh.Shard, op)
	}
	for reason, n := range r.Skipped {
		e.counter(shardSkippedDesc, float64(n), sh.Shard, reason)
	}
}

// emitVerify emits the last verification's result and streaming
// verification's passes and queue.
func (e emitter) emitVerify(v *engine.VerifyStatus, sv *verify.StreamStatus) {
	if v != nil && !v.Running {
		e.gauge(verifyOKDesc, oneIf(v.OK))
		e.gauge(verifyDiffDesc, float64(len(v.Differing)))
	}
	if sv == nil {
		return
	}
	e.gauge(svRunningDesc, oneIf(sv.Running))
	e.counter(svPassesDesc, float64(sv.Passes))
	e.gauge(svDocsDesc, float64(sv.Compared))
	e.gauge(svPendingDesc, float64(sv.PendingRechecks))
	e.gauge(svPendingBytes, float64(sv.PendingBytes))
	e.gauge(svMaxPending, float64(sv.MaxPendingBytes))
	e.gauge(svPersistingDesc, float64(sv.Persisting))
	e.gauge(svNotRechecked, float64(sv.NotRechecked+sv.Unsettled))
	if sv.Passes > 0 && !sv.Running {
		e.gauge(svOKDesc, oneIf(sv.OK))
	}
}

// oneIf is 1 when b holds, 0 otherwise: the value of a 0/1 gauge.
func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WriteLatency is the histogram of target write batch durations.
func WriteLatency(task string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "mongoferry_write_batch_duration_seconds",
		Help:        "Duration of one write batch on the target, by operation.",
		Buckets:     prometheus.ExponentialBuckets(0.001, 2, 16),
		ConstLabels: prometheus.Labels{"task": task},
	}, []string{"op"})
}

// NewRegistry returns a registry with the Go runtime and process
// collectors and the given ones.
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

// HTTPHandler serves the registry's metrics: the worker's /metrics
// (workerapi.Handler serves it beside the worker's API).
func HTTPHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
