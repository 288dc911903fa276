package controller

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// The collector reads SyncTasks and their worker pods, nothing else; the
// reconciler's markers grant more.
// +kubebuilder:rbac:groups=sync.mongoferry.io,resources=synctasks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// SyncTaskPhases lists every phase a SyncTask can be in, so that
// mongoferry_synctask_phase has a 0/1 series for each.
var SyncTaskPhases = []syncv1alpha1.Phase{
	syncv1alpha1.PhasePending,
	syncv1alpha1.PhaseFullSync,
	syncv1alpha1.PhaseStreaming,
	syncv1alpha1.PhasePaused,
	syncv1alpha1.PhaseVerifying,
	syncv1alpha1.PhaseCompleted,
	syncv1alpha1.PhaseFailed,
}

func syncTaskDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("mongoferry_synctask_"+name, help, append([]string{"namespace", "synctask"}, labels...), nil)
}

var (
	stPhaseDesc      = syncTaskDesc("phase", "1 for the SyncTask's current phase (status.phase), 0 for the others.", "phase")
	stLagDesc        = syncTaskDesc("lag_seconds", "Seconds the target is behind the source, the largest over shards (status.lagSeconds).")
	stProgressDesc   = syncTaskDesc("progress_ratio", "Full copy progress from 0 to 1 (status.progress); 1 only once the copy has finished.")
	stOpsDesc        = syncTaskDesc("ops_per_second", "Changes applied to the target per second, summed over shards (status.opsPerSecond).")
	stBytesDesc      = syncTaskDesc("bytes_per_second", "Document bytes written to the target per second, summed over shards (status.bytesPerSecond).")
	stReadyDesc      = syncTaskDesc("ready", "1 when the SyncTask's Ready condition is True, 0 otherwise.")
	stShardsDesc     = syncTaskDesc("shards", "Workers reporting in status.shards: one per shard of a sharded source, one for a replica set.")
	stCheckpointDesc = syncTaskDesc("checkpoint_timestamp_seconds", "Unix time of the oplog position up to which every shard has been applied and saved (status.checkpointTime).")
	stInfoDesc       = syncTaskDesc("info", "Always 1; the SyncTask's mode and source kind (spec.mode, spec.source.kind) as labels.", "mode", "source_kind")
	stCopyDocsDesc   = syncTaskDesc("copy_documents_total", "Documents the full copy has written to the target, summed over shards (status.progress.documents).")
	stShardLagDesc   = syncTaskDesc("shard_lag_seconds", "Seconds one shard's applied changes are behind its source (status.shards[].lagSeconds).", "shard")
	stShardHeldDesc  = syncTaskDesc("shard_held_writes", "Writes one shard's worker has held back after chunk migrations (status.shards[].heldWrites).", "shard")
	stConditionDesc  = syncTaskDesc("condition", "Always 1; one series per status condition, with its type, status and reason as labels.", "type", "status", "reason")
	stRestartsDesc   = syncTaskDesc("worker_restarts_total", "Restarts of the worker container of one worker pod (the pod's status.containerStatuses[].restartCount).", "pod")
	stListErrorsDesc = prometheus.NewDesc("mongoferry_synctask_list_errors_total",
		"Scrapes at which the SyncTasks or their worker pods could not be listed from the manager's cache (their series are then missing).", nil, nil)
)

// DefaultListTimeout bounds the listing of SyncTasks at one scrape, well
// within Prometheus' default scrape timeout (10 s).
const DefaultListTimeout = 5 * time.Second

// SyncTaskCollector exports each SyncTask's status as Prometheus metrics, so
// that dashboards and alerts can be built from the CRD status alone, and the
// restart counts of the tasks' worker pods. It lists the SyncTasks and the
// worker pods from Reader (the manager's cache) at every scrape, so the
// values are those `kubectl get synctasks` and `kubectl get pods` show at
// that moment.
type SyncTaskCollector struct {
	// Reader lists the SyncTasks; the manager's cache in the operator.
	Reader client.Reader
	// Elected, when set, is closed once this replica leads (the manager's
	// Elected()). Until then the collector exports nothing but its error
	// counter, so that with several manager replicas only the leader
	// exports task series and sums over them count each task once.
	Elected <-chan struct{}
	// Timeout bounds the list at one scrape; DefaultListTimeout when zero.
	Timeout time.Duration
	// Log receives list errors; slog.Default() when nil.
	Log *slog.Logger

	listErrors atomic.Uint64
}

// RegisterSyncTaskCollector registers c on controller-runtime's metrics
// registry, which the manager's metrics endpoint serves.
func RegisterSyncTaskCollector(c *SyncTaskCollector) error {
	return crmetrics.Registry.Register(c)
}

// Describe implements prometheus.Collector.
func (c *SyncTaskCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{stPhaseDesc, stLagDesc, stProgressDesc, stOpsDesc, stBytesDesc,
		stReadyDesc, stShardsDesc, stCheckpointDesc, stInfoDesc, stCopyDocsDesc, stShardLagDesc, stShardHeldDesc, stConditionDesc,
		stRestartsDesc, stListErrorsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *SyncTaskCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() {
		ch <- prometheus.MustNewConstMetric(stListErrorsDesc, prometheus.CounterValue, float64(c.listErrors.Load()))
	}()
	if c.Elected != nil {
		select {
		case <-c.Elected:
		default:
			return
		}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultListTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var list syncv1alpha1.SyncTaskList
	if err := c.Reader.List(ctx, &list); err != nil {
		// An invalid metric would fail the whole scrape (the metrics
		// server answers 500 on any collector error) and hide
		// controller-runtime's own metrics with it: count and log instead.
		c.listFailed("SyncTasks", err)
		return
	}
	for i := range list.Items {
		collectSyncTask(ch, &list.Items[i])
	}
	c.collectRestarts(ctx, ch, list.Items)
}

func (c *SyncTaskCollector) listFailed(what string, err error) {
	c.listErrors.Add(1)
	log := c.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("metrics: cannot list "+what, "err", err)
}

// collectRestarts exports the restart count of the worker container of
// every worker pod that belongs to one of tasks.
func (c *SyncTaskCollector) collectRestarts(ctx context.Context, ch chan<- prometheus.Metric, tasks []syncv1alpha1.SyncTask) {
	var pods corev1.PodList
	if err := c.Reader.List(ctx, &pods, client.MatchingLabels{appNameLabel: appNameWorker, ManagedByLabel: ManagedBy}); err != nil {
		c.listFailed("worker pods", err)
		return
	}
	known := make(map[[2]string]bool, len(tasks))
	for _, t := range tasks {
		known[[2]string{t.Namespace, t.Name}] = true
	}
	for _, p := range pods.Items {
		task := p.Labels[TaskLabel]
		if !known[[2]string{p.Namespace, task}] {
			continue // a pod left over from a deleted task
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == WorkerContainer {
				ch <- prometheus.MustNewConstMetric(stRestartsDesc, prometheus.CounterValue, float64(cs.RestartCount), p.Namespace, task, p.Name)
			}
		}
	}
}

func collectSyncTask(ch chan<- prometheus.Metric, t *syncv1alpha1.SyncTask) {
	ns, name := t.Namespace, t.Name
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{ns, name}, labels...)...)
	}
	st := &t.Status

	// A task the controller has not reported on yet is Pending.
	phase := st.Phase
	if phase == "" {
		phase = syncv1alpha1.PhasePending
	}
	for _, p := range SyncTaskPhases {
		gauge(stPhaseDesc, boolValue(p == phase), string(p))
	}
	if st.LagUnknown == "" {
		// Absent while unknown: a 0 would read as caught up.
		gauge(stLagDesc, float64(st.LagSeconds))
	}
	if r, ok := progressRatio(st.Progress); ok {
		gauge(stProgressDesc, r)
	}
	gauge(stOpsDesc, float64(st.OpsPerSecond))
	gauge(stBytesDesc, float64(st.BytesPerSecond))
	gauge(stReadyDesc, boolValue(meta.IsStatusConditionTrue(st.Conditions, syncv1alpha1.ConditionReady)))
	gauge(stShardsDesc, float64(len(st.Shards)))
	if st.CheckpointTime != nil {
		gauge(stCheckpointDesc, unixSeconds(st.CheckpointTime))
	}
	// The API server fills in the defaults; the fallbacks are the same
	// values, for objects read from elsewhere.
	mode := string(t.Spec.Mode)
	if mode == "" {
		mode = "fullAndIncremental"
	}
	kind := string(t.Spec.Source.Kind)
	if kind == "" {
		kind = "auto"
	}
	gauge(stInfoDesc, 1, mode, kind)

	var docs int64
	if st.Progress != nil {
		docs = st.Progress.Documents
	}
	ch <- prometheus.MustNewConstMetric(stCopyDocsDesc, prometheus.CounterValue, float64(docs), ns, name)
	seen := map[string]bool{}
	for _, s := range st.Shards {
		if !seen[s.Name] {
			seen[s.Name] = true
			if s.LagUnknown == "" {
				gauge(stShardLagDesc, float64(s.LagSeconds), s.Name)
			}
			gauge(stShardHeldDesc, float64(s.HeldWrites), s.Name)
		}
	}
	for _, cnd := range st.Conditions {
		gauge(stConditionDesc, 1, cnd.Type, string(cnd.Status), cnd.Reason)
	}
}

// progressRatio is the copy progress from 0 to 1: documents over
// estimatedDocuments for precision, but never 1 before percent says 100%
// (the estimate is taken when the copy starts and the source keeps
// changing, so the count can reach it early: 0.99 at most until then), and
// percent alone when there is no estimate. ok is false when there is
// nothing to report (no progress yet, or a mode that does not copy).
func progressRatio(p *syncv1alpha1.CopyProgress) (ratio float64, ok bool) {
	if p == nil {
		return 0, false
	}
	pct, hasPct := parsePercent(p.Percent)
	if hasPct && pct >= 1 {
		return 1, true
	}
	if p.EstimatedDocuments > 0 {
		r := math.Max(0, float64(p.Documents)/float64(p.EstimatedDocuments))
		if r < 1 {
			return r, true
		}
		if hasPct {
			return pct, true
		}
		// Counted up to the estimate but not finished.
		return 0.99, true
	}
	if hasPct {
		return pct, true
	}
	if p.Documents == 0 && p.Bytes == 0 {
		return 0, true
	}
	return 0, false
}

// parsePercent reads "42%" as 0.42, clamped to [0, 1].
func parsePercent(s string) (float64, bool) {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(s), "%") {
		return 0, false
	}
	return math.Min(1, math.Max(0, float64(n)/100)), true
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t *metav1.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
