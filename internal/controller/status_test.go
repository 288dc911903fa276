package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

var statusNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func copying(docs, est int64) *workerapi.Status {
	return &workerapi.Status{Phase: workerapi.PhaseFullSync, StartedAt: statusNow.Add(-time.Minute),
		Copy: workerapi.Copy{Documents: docs, EstimatedDocuments: est, Bytes: docs * 100, Ranges: 4, RangesDone: 1, BytesPerSecond: 5000}}
}

func streaming(lag, ops float64, docs int64) *workerapi.Status {
	return &workerapi.Status{Phase: workerapi.PhaseStreaming, StartedAt: statusNow.Add(-time.Minute),
		Copy: workerapi.Copy{Documents: docs, EstimatedDocuments: docs, Ranges: 4, RangesDone: 4, Percent: 100},
		Replay: &workerapi.Replay{AppliedTS: workerapi.Timestamp{T: uint32(statusNow.Unix()) - 5, I: 1}, AppliedTime: statusNow.Add(-5 * time.Second),
			LagSeconds: lag, OpsPerSecond: ops}}
}

func worker(ord int, report *workerapi.Status) workerObservation {
	return workerObservation{pod: "orders-worker-" + string(rune('0'+ord)), ordinal: ord, shard: "orders-worker-" + string(rune('0'+ord)),
		running: true, ready: true, report: report}
}

func TestComputeStatus(t *testing.T) {
	type want struct {
		phase                syncv1alpha1.Phase
		percent              string
		lag, ops             int64
		ready, degraded      string // "Status/Reason"
		progressing          string
		readyMessageContains string
	}
	exited := func(code int32, msg string) workerObservation {
		w := worker(0, nil)
		w.running, w.ready, w.restarts = false, false, 2
		w.lastExit = &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, FinishedAt: metav1.NewTime(statusNow.Add(-time.Minute))}
		w.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		return w
	}
	cases := []struct {
		name string
		old  syncv1alpha1.SyncTaskStatus
		o    observed
		want want
	}{
		{"no workers yet", syncv1alpha1.SyncTaskStatus{}, observed{},
			want{phase: "Pending", percent: "0%", ready: "False/WorkersStarting", degraded: "False/Healthy", progressing: "True/WorkersStarting"}},
		{"copying", syncv1alpha1.SyncTaskStatus{}, observed{workers: []workerObservation{worker(0, copying(420, 1000))}},
			want{phase: "FullSync", percent: "42%", ready: "False/FullSync", degraded: "False/Healthy", progressing: "True/FullSync",
				readyMessageContains: "copying: 42% (420 of about 1000 documents)"}},
		{"copy past the estimate stays below 100%", syncv1alpha1.SyncTaskStatus{}, observed{workers: []workerObservation{worker(0, copying(1200, 1000))}},
			want{phase: "FullSync", percent: "99%", ready: "False/FullSync", degraded: "False/Healthy", progressing: "True/FullSync"}},
		{"streaming, caught up", syncv1alpha1.SyncTaskStatus{}, observed{workers: []workerObservation{worker(0, streaming(2, 19.6, 1000))}},
			want{phase: "Streaming", percent: "100%", lag: 2, ops: 20, ready: "True/Streaming", degraded: "False/Healthy", progressing: "True/Streaming"}},
		{"streaming, lagging", syncv1alpha1.SyncTaskStatus{}, observed{workers: []workerObservation{worker(0, streaming(45, 3, 1000))}},
			want{phase: "Streaming", percent: "100%", lag: 45, ops: 3, ready: "False/Lagging", degraded: "False/Healthy", progressing: "True/Streaming"}},
		{"shards: slowest phase, max lag, summed ops", syncv1alpha1.SyncTaskStatus{}, observed{workers: []workerObservation{
			worker(0, streaming(3, 10, 500)), worker(1, streaming(7, 5, 500)), worker(2, copying(10, 100))}},
			want{phase: "FullSync", percent: "91%", lag: 7, ops: 15, ready: "False/FullSync", degraded: "False/Healthy", progressing: "True/FullSync"}},
		{"suspended", syncv1alpha1.SyncTaskStatus{Phase: "Streaming", Progress: &syncv1alpha1.CopyProgress{Percent: "100%", Documents: 5}},
			observed{suspended: true},
			want{phase: "Paused", percent: "100%", ready: "False/Suspended", degraded: "False/Healthy", progressing: "False/Suspended"}},
		{"resumed after the copy: documents kept", syncv1alpha1.SyncTaskStatus{Phase: "Paused", Progress: &syncv1alpha1.CopyProgress{Percent: "100%", Documents: 1000, EstimatedDocuments: 1000},
			Shards: []syncv1alpha1.ShardStatus{{Name: "orders-worker-0", Documents: 1000}}},
			observed{workers: []workerObservation{worker(0, streaming(1, 0, 0))}},
			want{phase: "Streaming", percent: "100%", lag: 1, ready: "True/Streaming", degraded: "False/Healthy", progressing: "True/Streaming"}},
		{"oplog window lost", syncv1alpha1.SyncTaskStatus{Phase: "Streaming"},
			observed{workers: []workerObservation{exited(3, "starting\nferry: source: oplog window lost: checkpoint 1:1 is older than the oldest entry")}},
			want{phase: "Failed", percent: "0%", ready: "False/Failed", degraded: "True/OplogWindowLost", progressing: "False/Failed",
				readyMessageContains: "oplog window lost: checkpoint 1:1"}},
		{"crash loop before any report", syncv1alpha1.SyncTaskStatus{},
			observed{workers: []workerObservation{exited(1, "ferry: source: authentication failed at mongodb://src/")}},
			want{phase: "Pending", percent: "0%", ready: "False/WorkersStarting", degraded: "True/WorkerFailing", progressing: "True/WorkersStarting",
				readyMessageContains: "CrashLoopBackOff, restarted 2 times: exit code 1: ferry: source: authentication failed"}},
		// A replaying task on a source without an oplog fails before it
		// writes: by its exit (a crash loop, restarted until the source
		// is fixed) or by its /status, the message says why and what to do.
		{"source without an oplog, by exit code", syncv1alpha1.SyncTaskStatus{},
			observed{workers: []workerObservation{exited(1, "starting\nferry: mode: fullAndIncremental: no oplog to replay: the source has no local.oplog.rs "+
				"(a standalone server, or a FerretDB without an oplog, writes none); nothing was written: run it as a replica set, or set mode: full")}},
			want{phase: "Pending", percent: "0%", ready: "False/WorkersStarting", degraded: "True/WorkerFailing", progressing: "True/WorkersStarting",
				readyMessageContains: "exit code 1: ferry: mode: fullAndIncremental: no oplog to replay: the source has no local.oplog.rs"}},
		{"source without an oplog, seen in /status", syncv1alpha1.SyncTaskStatus{},
			observed{workers: []workerObservation{worker(0, &workerapi.Status{Phase: workerapi.PhaseFailed,
				Error: "mode: fullAndIncremental: no oplog to replay: shard rs1 of the source has no local.oplog.rs; nothing was written: run it as a replica set, or set mode: full"})}},
			want{phase: "Failed", percent: "0%", ready: "False/Failed", degraded: "True/Failed", progressing: "False/Failed",
				readyMessageContains: "orders-worker-0: mode: fullAndIncremental: no oplog to replay: shard rs1 of the source has no local.oplog.rs"}},
		{"completed, reported by exit 0", syncv1alpha1.SyncTaskStatus{Phase: "Verifying"},
			observed{workers: []workerObservation{func() workerObservation { w := exited(0, ""); w.waiting = nil; return w }()}},
			want{phase: "Completed", percent: "100%", ready: "True/Completed", degraded: "False/Healthy", progressing: "False/Completed"}},
		{"completed, then restarted and checking again", syncv1alpha1.SyncTaskStatus{Phase: "Verifying"},
			observed{workers: []workerObservation{func() workerObservation {
				w := worker(0, &workerapi.Status{Phase: workerapi.PhaseVerifying, Verify: &workerapi.Verify{Mode: "hash", Running: true}})
				w.restarts, w.lastExit = 1, &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.NewTime(statusNow.Add(-time.Second))}
				return w
			}()}},
			want{phase: "Completed", percent: "100%", ready: "True/Completed", degraded: "False/Healthy", progressing: "False/Completed",
				readyMessageContains: "the copy is complete; source and target match (hash)"}},
		{"verification failed, by exit code", syncv1alpha1.SyncTaskStatus{Phase: "Verifying"},
			observed{workers: []workerObservation{exited(2, "ferry: verification found differences: see the verification report")}},
			want{phase: "Failed", percent: "0%", ready: "False/Failed", degraded: "True/VerificationFailed", progressing: "False/Failed"}},
		{"verification failed, seen in /status before the exit", syncv1alpha1.SyncTaskStatus{Phase: "Verifying"},
			observed{workers: []workerObservation{worker(0, &workerapi.Status{Phase: workerapi.PhaseFailed, Error: "verification found differences",
				Verify: &workerapi.Verify{Mode: "hash", Differing: []string{"shop.orders"}}})}},
			want{phase: "Failed", percent: "0%", ready: "False/Failed", degraded: "True/VerificationFailed", progressing: "False/Failed",
				readyMessageContains: "shop.orders"}},
		{"failed: the workers are stopped and it stays Failed", syncv1alpha1.SyncTaskStatus{Phase: "Failed", Failures: 1,
			LastFailure: &syncv1alpha1.Failure{Reason: syncv1alpha1.ReasonVerificationFailed, Message: "orders-worker-0: exit code 2: verification found differences"}},
			observed{failedStop: true},
			want{phase: "Failed", percent: "0%", ready: "False/Failed", degraded: "True/VerificationFailed", progressing: "False/Failed",
				readyMessageContains: "verification found differences; the workers are stopped: fix the cause, then change the spec or set the annotation sync.mongoferry.io/retry"}},
		{"failed, then retried: Pending until the workers report", syncv1alpha1.SyncTaskStatus{Phase: "Failed", Failures: 1,
			LastFailure: &syncv1alpha1.Failure{Reason: syncv1alpha1.ReasonVerificationFailed, Message: "differences"},
			Shards:      []syncv1alpha1.ShardStatus{{Name: "orders-worker-0", Phase: "Failed", LastError: "verification found differences"}}},
			observed{restart: true, retry: "1"},
			want{phase: "Pending", percent: "0%", ready: "False/WorkersStarting", degraded: "False/Healthy", progressing: "True/WorkersStarting"}},
		{"completed stays completed without workers", syncv1alpha1.SyncTaskStatus{Phase: "Completed"}, observed{},
			want{phase: "Completed", percent: "100%", ready: "True/Completed", degraded: "False/Healthy", progressing: "False/Completed"}},
		{"status unreadable", syncv1alpha1.SyncTaskStatus{},
			observed{workers: []workerObservation{func() workerObservation { w := worker(0, nil); w.pollErr = errors.New("connection refused"); return w }()}},
			want{phase: "Pending", percent: "0%", ready: "False/WorkersStarting", degraded: "True/StatusUnavailable", progressing: "True/WorkersStarting"}},
		{"blocked", syncv1alpha1.SyncTaskStatus{}, observed{blocked: &blockedError{syncv1alpha1.ReasonSecretNotFound, "source.credentialsSecret: missing"}},
			want{phase: "Pending", percent: "0%", ready: "False/SecretNotFound", degraded: "True/SecretNotFound", progressing: "False/SecretNotFound"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.o.generation, c.o.now, c.o.mode = 7, statusNow, config.ModeFullAndIncremental
			st := computeStatus(&c.old, c.o)
			if st.Phase != c.want.phase || st.LagSeconds != c.want.lag || st.OpsPerSecond != c.want.ops {
				t.Errorf("phase %s lag %d ops %d, want %s %d %d", st.Phase, st.LagSeconds, st.OpsPerSecond, c.want.phase, c.want.lag, c.want.ops)
			}
			if st.Progress == nil || st.Progress.Percent != c.want.percent {
				t.Errorf("progress %+v, want %s", st.Progress, c.want.percent)
			}
			if st.ObservedGeneration != 7 {
				t.Errorf("observedGeneration %d", st.ObservedGeneration)
			}
			for typ, w := range map[string]string{syncv1alpha1.ConditionReady: c.want.ready, syncv1alpha1.ConditionDegraded: c.want.degraded,
				syncv1alpha1.ConditionProgressing: c.want.progressing} {
				cond := meta.FindStatusCondition(st.Conditions, typ)
				if cond == nil {
					t.Errorf("no %s condition", typ)
					continue
				}
				if got := string(cond.Status) + "/" + cond.Reason; got != w {
					t.Errorf("%s = %s (%s), want %s", typ, got, cond.Message, w)
				}
				if cond.ObservedGeneration != 7 {
					t.Errorf("%s observedGeneration %d", typ, cond.ObservedGeneration)
				}
			}
			if m := c.want.readyMessageContains; m != "" {
				if cond := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionReady); !strings.Contains(cond.Message, m) {
					t.Errorf("Ready message %q does not contain %q", cond.Message, m)
				}
			}
		})
	}
}

func TestComputeStatusDetails(t *testing.T) {
	o := observed{generation: 1, now: statusNow, mode: config.ModeFullAndIncremental, workers: []workerObservation{worker(0, streaming(2, 4, 800))}}
	st := computeStatus(&syncv1alpha1.SyncTaskStatus{}, o)
	if len(st.Shards) != 1 {
		t.Fatalf("shards %+v", st.Shards)
	}
	sh := st.Shards[0]
	wantTS := fmt.Sprintf("%d:1", statusNow.Unix()-5)
	if sh.Name != "orders-worker-0" || sh.Phase != "Streaming" || sh.Documents != 800 || sh.LagSeconds != 2 || sh.OpsPerSecond != 4 ||
		sh.AppliedTimestamp != wantTS || sh.LastReportTime == nil || !sh.LastReportTime.Time.Equal(statusNow) {
		t.Errorf("shard %+v", sh)
	}
	if st.CheckpointTime == nil || !st.CheckpointTime.Time.Equal(statusNow.Add(-5*time.Second)) {
		t.Errorf("checkpointTime %v", st.CheckpointTime)
	}
	if st.StartedAt == nil || !st.StartedAt.Time.Equal(statusNow.Add(-time.Minute)) {
		t.Errorf("startedAt %v", st.StartedAt)
	}

	// Verification: first seen now, then its time is kept.
	rep := streaming(0, 0, 800)
	rep.Phase = workerapi.PhaseCompleted
	rep.Verify = &workerapi.Verify{Mode: "hash", OK: false, Differing: []string{"shop.orders"}}
	o.workers = []workerObservation{worker(0, rep)}
	st = computeStatus(&st, o)
	v := st.LastVerification
	if v == nil || v.Result != syncv1alpha1.VerificationFailed || v.Mode != config.VerifyHash || len(v.DifferingNamespaces) != 1 || !v.Time.Time.Equal(statusNow) {
		t.Fatalf("verification %+v", v)
	}
	if c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionDegraded); c.Reason != syncv1alpha1.ReasonVerificationFailed {
		t.Errorf("Degraded %+v, want VerificationFailed", c)
	}
	o.now = statusNow.Add(time.Minute)
	st = computeStatus(&st, o)
	if !st.LastVerification.Time.Time.Equal(statusNow) {
		t.Errorf("verification time moved to %v", st.LastVerification.Time)
	}

	// Mode incremental has no copy progress.
	o.mode = config.ModeIncremental
	if st := computeStatus(&syncv1alpha1.SyncTaskStatus{}, o); st.Progress != nil {
		t.Errorf("incremental: progress %+v", st.Progress)
	}
}

// TestShardedStatus: entries by the plan's ordinals (Pending before a
// worker reports), per-shard held writes, a retired shard out of the
// summary, the phase and the checkpoint.
func TestShardedStatus(t *testing.T) {
	plan := shardPlan{entries: []shardEntry{{name: "rs0", ordinal: 0}, {name: "rs1", ordinal: 1, removed: true}, {name: "rs2", ordinal: 2}, {name: "rs3", ordinal: 3}}}
	shardWorker := func(ord int, name string, r *workerapi.Status) workerObservation {
		w := worker(ord, r)
		w.shard = name
		return w
	}
	retired := streaming(0, 0, 0)
	retired.Shards = []workerapi.Shard{{Shard: "rs1", Phase: workerapi.SubtaskRetired}}
	held := shardWorker(2, "rs2", streaming(4, 12, 0))
	held.held = 7
	o := observed{plan: plan, shardNames: plan.names(), now: statusNow, workers: []workerObservation{
		shardWorker(0, "rs0", streaming(1, 30, 900)), shardWorker(1, "rs1", retired), held,
	}}
	st := computeStatus(&syncv1alpha1.SyncTaskStatus{}, o)
	type entry struct {
		name    string
		ordinal int32
		phase   syncv1alpha1.Phase
		held    int64
		removed bool
	}
	var got []entry
	for _, s := range st.Shards {
		got = append(got, entry{s.Name, s.Ordinal, s.Phase, s.HeldWrites, s.Removed})
	}
	want := []entry{{"rs0", 0, "Streaming", 0, false}, {"rs1", 1, "Retired", 0, true}, {"rs2", 2, "Streaming", 7, false}, {"rs3", 3, "Pending", 0, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shards %+v, want %+v", got, want)
	}
	if st.ShardSummary != "2/3 streaming" || st.Phase != syncv1alpha1.PhasePending || st.LagSeconds != 4 || st.OpsPerSecond != 42 {
		t.Errorf("summary %q, phase %s, lag %d, ops %d; want 2/3 streaming, Pending, 4, 42", st.ShardSummary, st.Phase, st.LagSeconds, st.OpsPerSecond)
	}

	// rs3's worker reports too: every shard not retired streams.
	o.workers = append(o.workers, shardWorker(3, "rs3", streaming(0, 1, 0)))
	st = computeStatus(&st, o)
	if st.ShardSummary != "3/3 streaming" || st.Phase != syncv1alpha1.PhaseStreaming || st.CheckpointTime == nil {
		t.Errorf("summary %q, phase %s, checkpoint %v; want 3/3 streaming, Streaming and a checkpoint", st.ShardSummary, st.Phase, st.CheckpointTime)
	}
}

// TestHeldReport reads the writes held after migrations from a worker's
// /status: per shard subtask, else the worker's replay; 0 when absent.
func TestHeldReport(t *testing.T) {
	for _, tt := range []struct {
		body string
		want int64
	}{
		{`{"phase":"Streaming","replay":{"lagSeconds":1}}`, 0},
		{`{"replay":{"holds":{"heldWrites":5,"heldNow":2}}}`, 5},
		{`{"replay":{"holds":{"heldWrites":9}},"shards":[{"shard":"rs1","replay":{"holds":{"heldWrites":3}}},{"shard":"rs2"}]}`, 3},
	} {
		var h workerapi.Status
		if err := json.Unmarshal([]byte(tt.body), &h); err != nil {
			t.Fatal(err)
		}
		if got := h.HeldWrites(); got != tt.want {
			t.Errorf("%s: %d held, want %d", tt.body, got, tt.want)
		}
	}
}

func TestShardSummary(t *testing.T) {
	sh := func(phases ...syncv1alpha1.Phase) []syncv1alpha1.ShardStatus {
		var out []syncv1alpha1.ShardStatus
		for _, p := range phases {
			out = append(out, syncv1alpha1.ShardStatus{Phase: p})
		}
		return out
	}
	for _, tt := range []struct {
		shards []syncv1alpha1.ShardStatus
		want   string
	}{
		{nil, ""},
		{sh("Streaming", "Streaming", "Streaming"), "3/3 streaming"},
		{sh("FullSync", "Pending", "Pending"), "0/3 streaming"},
		{sh("Retired", "Streaming", "Pending"), "1/2 streaming"},
		{sh("Retired", "Paused", "Paused"), "2/2 paused"},
		{sh("Completed"), "1/1 completed"},
		{sh("FullSync"), "1/1 copying"},
	} {
		if got := shardSummary(tt.shards); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.shards, got, tt.want)
		}
	}
}

func TestPlanShards(t *testing.T) {
	task := &syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	prev := []syncv1alpha1.ShardStatus{{Name: "b", Ordinal: 0}, {Name: "a", Ordinal: 1, Removed: true, Phase: syncv1alpha1.PhaseRetired}}
	tests := []struct {
		name           string
		prev           []syncv1alpha1.ShardStatus
		d              discovery
		want           string // name:ordinal[:removed] ...
		added, removed []string
		replicas       int32
	}{
		{"replica set", nil, discovery{known: true}, "", nil, nil, 1},
		{"nobody reported yet: one worker", nil, discovery{}, "", nil, nil, 1},
		{"nobody reports (stopped): mapping kept", prev, discovery{}, "b:0 a:1:removed", nil, nil, 1},
		{"first discovery: name order", []syncv1alpha1.ShardStatus{{Name: "orders-worker-0"}}, discovery{known: true, sharded: true, names: []string{"c", "a", "b"}}, "a:0 b:1 c:2", nil, nil, 3},
		{"unreachable, nothing known: one worker", nil, discovery{known: true, err: errors.New("x")}, "", nil, nil, 1},
		{"unreachable: mapping kept", prev, discovery{known: true, err: errors.New("x")}, "b:0 a:1:removed", nil, nil, 1},
		{"retired last shard: scaled down", prev, discovery{known: true, sharded: true, names: []string{"b"}}, "b:0 a:1:removed", nil, nil, 1},
		{"a shard comes back", prev, discovery{known: true, sharded: true, names: []string{"a", "b"}}, "b:0 a:1", []string{"a"}, nil, 2},
		{"added and removed", prev[:1], discovery{known: true, sharded: true, names: []string{"c", "a"}}, "b:0:removed a:1 c:2", []string{"a", "c"}, []string{"b"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := planShards(task, tt.prev, tt.d)
			var got []string
			for _, e := range p.entries {
				s := fmt.Sprintf("%s:%d", e.name, e.ordinal)
				if e.removed {
					s += ":removed"
				}
				got = append(got, s)
			}
			if strings.Join(got, " ") != tt.want || fmt.Sprint(p.added) != fmt.Sprint(tt.added) || fmt.Sprint(p.removed) != fmt.Sprint(tt.removed) {
				t.Errorf("plan %v added %v removed %v; want %s, %v, %v", got, p.added, p.removed, tt.want, tt.added, tt.removed)
			}
			if n := p.replicas(tt.prev); n != tt.replicas {
				t.Errorf("replicas %d, want %d", n, tt.replicas)
			}
		})
	}
	// The workers' mapping marks a removed shard whose worker retired: a
	// restart of that worker idles.
	p := planShards(task, prev, discovery{known: true, sharded: true, names: []string{"b"}})
	if got, want := string(p.shardMap(prev)), `[{"name":"b"},{"name":"a","retired":true}]`; got != want {
		t.Errorf("shard map %s, want %s", got, want)
	}
}

// TestFailureRecorded: a task that fails counts the failure once, with its
// reason and time; a retry records the annotation's value and keeps the
// count.
func TestFailureRecorded(t *testing.T) {
	w := worker(0, nil)
	w.running, w.ready, w.restarts = false, false, 1
	w.lastExit = &corev1.ContainerStateTerminated{ExitCode: workerapi.ExitVerificationFailed, Message: "ferry: verification found differences", FinishedAt: metav1.NewTime(statusNow)}
	o := observed{generation: 3, now: statusNow, mode: config.ModeFull, workers: []workerObservation{w}}
	st := computeStatus(&syncv1alpha1.SyncTaskStatus{Phase: "Verifying"}, o)
	if st.Phase != syncv1alpha1.PhaseFailed || st.Failures != 1 || st.LastFailure == nil || st.LastFailure.Reason != syncv1alpha1.ReasonVerificationFailed || !st.LastFailure.Time.Equal(&metav1.Time{Time: statusNow}) {
		t.Fatalf("phase %s, failures %d, last %+v", st.Phase, st.Failures, st.LastFailure)
	}
	o.failedStop = true
	again := computeStatus(&st, o)
	if again.Failures != 1 {
		t.Errorf("a stopped failed task counted %d failures, want 1", again.Failures)
	}
	retried := computeStatus(&again, observed{generation: 3, now: statusNow, mode: config.ModeFull, restart: true, retry: "2026-03-01"})
	if retried.Phase != syncv1alpha1.PhasePending || retried.LastRetry != "2026-03-01" || retried.Failures != 1 || retried.LastVerification != nil {
		t.Errorf("retried: phase %s, lastRetry %q, failures %d, verification %+v", retried.Phase, retried.LastRetry, retried.Failures, retried.LastVerification)
	}
}

// TestTargetShardingCondition: the notes of the worker that prepared a
// sharded target become the TargetSharding condition; without notes it
// names the collections; without a report it stays as it was.
func TestTargetShardingCondition(t *testing.T) {
	report := func(ts ...workerapi.TargetSharding) workerObservation {
		return worker(0, &workerapi.Status{Phase: workerapi.PhaseFullSync, TargetSharding: ts})
	}
	for _, tc := range []struct {
		name    string
		old     []metav1.Condition
		workers []workerObservation
		want    string // "Status/Reason", or "" for no condition
		message string
	}{
		{"unsharded target: no condition", nil, []workerObservation{worker(0, copying(1, 10))}, "", ""},
		{"as planned", nil, []workerObservation{report(
			workerapi.TargetSharding{Namespace: "shop.orders", Key: "{region: 1, _id: 1}", Placement: "moveRange", Chunks: 6},
			workerapi.TargetSharding{Namespace: "shop.users", Key: `{_id: "hashed"}`, Placement: "hashedInitialChunks"})},
			"True/AsPlanned", `2 target collections sharded and pre-split before the copy: shop.orders {region: 1, _id: 1}, shop.users {_id: "hashed"}`},
		{"notes", nil, []workerObservation{report(
			workerapi.TargetSharding{Namespace: "shop.orders", Key: "{region: 1}", Placement: "balancer",
				Notes: []string{"zone EU has no target shard: chunks left to the balancer"}})},
			"False/ShardingNotes", "shop.orders: zone EU has no target shard"},
		{"no report now: kept", []metav1.Condition{{Type: syncv1alpha1.ConditionTargetSharding, Status: metav1.ConditionFalse,
			Reason: syncv1alpha1.ReasonShardingNotes, Message: "earlier notes", LastTransitionTime: metav1.Now()}},
			[]workerObservation{worker(0, streaming(1, 1, 10))}, "False/ShardingNotes", "earlier notes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := computeStatus(&syncv1alpha1.SyncTaskStatus{Conditions: tc.old}, observed{now: statusNow, workers: tc.workers})
			c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionTargetSharding)
			if tc.want == "" {
				if c != nil {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if c == nil || string(c.Status)+"/"+c.Reason != tc.want || !strings.Contains(c.Message, tc.message) {
				t.Fatalf("condition %+v, want %s with %q", c, tc.want, tc.message)
			}
		})
	}
}

// TestStreamingVerificationStatus maps a worker's streaming verification
// into status.streamingVerification: a pass that runs, one that matched,
// one that found a corrupted document, one whose recheck budget ran out.
func TestStreamingVerificationStatus(t *testing.T) {
	finished := statusNow.Add(-time.Second)
	finding := workerapi.VerifyFinding{Namespace: "shop.items", ID: `{"$numberInt":"500"}`, Kind: "changed"}
	cases := []struct {
		name        string
		old         *syncv1alpha1.StreamingVerification
		v           *workerapi.StreamingVerify
		wantResult  string
		wantMessage string
		wantIDs     []string
	}{
		{"no pass yet keeps the old", &syncv1alpha1.StreamingVerification{Result: syncv1alpha1.VerificationPassed}, nil, syncv1alpha1.VerificationPassed, "", nil},
		{"running", nil, &workerapi.StreamingVerify{Running: true, CurrentNamespace: "shop.items", Compared: 300, PendingRechecks: 4, Namespaces: 2},
			"", "comparing shop.items: 300 documents, 4 mismatches waiting for a recheck", nil},
		{"running again keeps the last result", &syncv1alpha1.StreamingVerification{Result: syncv1alpha1.VerificationFailed},
			&workerapi.StreamingVerify{Running: true, Passes: 1, CurrentNamespace: "shop.items"}, syncv1alpha1.VerificationFailed, "comparing shop.items: 0 documents, 0 mismatches waiting for a recheck", nil},
		{"matched", nil, &workerapi.StreamingVerify{Passes: 1, FinishedAt: finished, Compared: 641, Resolved: 28, OK: true},
			syncv1alpha1.VerificationPassed, "source and target match: 641 documents compared, 28 changes in flight rechecked", nil},
		{"corrupted document", nil, &workerapi.StreamingVerify{Passes: 1, FinishedAt: finished, Compared: 641, Persisting: 1, Findings: []workerapi.VerifyFinding{finding}},
			syncv1alpha1.VerificationFailed, `1 document differs after every recheck, first shop.items _id {"$numberInt":"500"} (changed)`, []string{`{"$numberInt":"500"}`}},
		{"budget full", nil, &workerapi.StreamingVerify{Passes: 1, FinishedAt: finished, PendingFull: true, NotRechecked: 12},
			syncv1alpha1.VerificationFailed, "12 mismatches were not rechecked: the recheck budget (verify.maxPendingBytes) was full", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := streaming(0, 0, 10)
			rep.StreamingVerify = tc.v
			got := streamingVerification(tc.old, []*workerapi.Status{rep})
			if got == nil {
				t.Fatal("no streaming verification")
			}
			if got.Result != tc.wantResult || (tc.wantMessage != "" && got.Message != tc.wantMessage) {
				t.Errorf("result %q, message %q; want %q, %q", got.Result, got.Message, tc.wantResult, tc.wantMessage)
			}
			var ids []string
			for _, f := range got.Findings {
				ids = append(ids, f.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.wantIDs, ",") {
				t.Errorf("findings %v, want %v", ids, tc.wantIDs)
			}
		})
	}
}

// TestCutoverVerificationFailure: a cut-over that fails at its
// verification is CutoverFailed whether the controller reads the worker's
// /status (step Failed, the verification's differences) or its exit code
// (4) first.
func TestCutoverVerificationFailure(t *testing.T) {
	report := &workerapi.Status{Phase: workerapi.PhaseFailed,
		Verify:  &workerapi.Verify{Mode: "hash", OK: false, Differing: []string{"shop.orders"}},
		Cutover: &workerapi.Cutover{Step: workerapi.CutoverFailed, Message: "Verifying: verification found differences: [shop.orders] differ"}}
	if f := reportedFailure("orders-0", report); f.reason != syncv1alpha1.ReasonCutoverFailed {
		t.Errorf("from /status: reason %s, want %s", f.reason, syncv1alpha1.ReasonCutoverFailed)
	}
	w := worker(0, nil)
	w.running, w.ready, w.restarts = false, false, 1
	w.lastExit = &corev1.ContainerStateTerminated{ExitCode: workerapi.ExitCutoverFailed, Message: "ferry: cut-over failed, step Verifying: verification found differences", FinishedAt: metav1.NewTime(statusNow)}
	if _, f := exitOutcome(w); f == nil || f.reason != syncv1alpha1.ReasonCutoverFailed {
		t.Errorf("from the exit code: %+v, want %s", f, syncv1alpha1.ReasonCutoverFailed)
	}
}
