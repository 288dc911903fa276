// Package dashboard builds the chart's Grafana dashboard (MongoFerry /
// SyncTask, uid mongoferry-synctask) with the Grafana Foundation SDK, so
// that its schema is checked when it is built; hack/gen-dashboard writes it
// to charts/mongoferry/dashboards (make manifests).
package dashboard

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	gd "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/gauge"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's stable uid.
const UID = "mongoferry-synctask"

// Selectors of the chosen task: the manager's series carry the SyncTask's
// namespace and name (synctask), the workers' its namespace (the pod's)
// and task.
const (
	managerSel = `namespace="$namespace", synctask="$task"`
	workerSel  = `namespace="$namespace", task="$task"`
)

var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// query is one PromQL target; instant for the stat and gauge panels.
type query struct {
	expr, legend string
}

func targets(instant bool, qs ...query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		b := prometheus.NewDataqueryBuilder().Datasource(ds).RefId(string(rune('A' + i))).Expr(q.expr).LegendFormat(q.legend)
		if instant {
			b = b.Instant()
		} else {
			b = b.Range()
		}
		out[i] = b
	}
	return out
}

func thresholds(base string, steps ...any) cog.Builder[gd.ThresholdsConfig] {
	ts := []gd.Threshold{{Color: base}}
	for i := 0; i+1 < len(steps); i += 2 {
		ts = append(ts, gd.Threshold{Value: cog.ToPtr(float64(steps[i].(int))), Color: steps[i+1].(string)})
	}
	return gd.NewThresholdsConfigBuilder().Mode(gd.ThresholdsModeAbsolute).Steps(ts)
}

func lastValue() cog.Builder[common.ReduceDataOptions] {
	return common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)
}

// statPanel shows one value; byName shows the series' legend (a label)
// instead, on a fixed color.
func statPanel(id uint32, title, desc, unit string, byName string, th cog.Builder[gd.ThresholdsConfig], q query) *stat.PanelBuilder {
	p := stat.NewPanelBuilder().Id(id).Title(title).Description(desc).Datasource(ds).Span(4).Height(4).
		Targets(targets(true, q)).ReduceOptions(lastValue()).GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeAuto).Orientation(common.VizOrientationAuto)
	if unit != "" {
		p = p.Unit(unit)
	}
	if th != nil {
		p = p.Thresholds(th)
	}
	if byName != "" {
		return p.ColorScheme(gd.NewFieldColorBuilder().Mode(gd.FieldColorModeIdFixed).FixedColor(byName)).
			ColorMode(common.BigValueColorModeBackground).TextMode(common.BigValueTextModeName)
	}
	return p.ColorMode(common.BigValueColorModeValue).TextMode(common.BigValueTextModeAuto)
}

// graph is a time series panel half the dashboard wide.
func graph(id uint32, title, desc, unit string, qs ...query) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Id(id).Title(title).Description(desc).Datasource(ds).Span(12).Height(8).Unit(unit).
		Targets(targets(false, qs...)).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

func row(id uint32, title string) *gd.RowBuilder {
	return gd.NewRowBuilder(title).Id(id)
}

func labelValues(sel, label string) string {
	return fmt.Sprintf("label_values(%s, %s)", sel, label)
}

func queryVariable(name, label, def string) *gd.QueryVariableBuilder {
	return gd.NewQueryVariableBuilder(name).Label(label).Datasource(ds).Definition(def).
		Query(gd.StringOrMap{Map: map[string]any{"query": def, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1}}).
		Refresh(gd.VariableRefreshOnTimeRangeChanged).Sort(gd.VariableSortAlphabeticalAsc).IncludeAll(false).Multi(false)
}

// Build returns the dashboard. It is a classic dashboard (schema v1, the
// dashboard package), which Grafana's dashboard sidecar and Import take in
// every Grafana version the chart supports; the SDK prefers its v2
// resource, which only Grafana 12's new API reads.
func Build() (gd.Dashboard, error) { //nolint:staticcheck // SA1019: see above
	//nolint:staticcheck // SA1019: see Build
	b := gd.NewDashboardBuilder("MongoFerry / SyncTask").Uid(UID).
		Description("One SyncTask: phase, copy progress, lag, throughput, buffers, write latency, errors, checkpoint age, the source oplog's headroom and the cut-over. Manager series (mongoferry_synctask_*) come from the chart's ServiceMonitor, worker series from the PodMonitor(s).").
		Tags([]string{"mongoferry", "mongodb"}).Editable().Tooltip(gd.DashboardCursorSyncCrosshair).Refresh("30s").Time("now-3h", "now").
		Timezone("").Version(1).
		Link(gd.NewDashboardLinkBuilder("Runbooks").Type(gd.DashboardLinkTypeLink).Url("https://github.com/mongoferry/mongoferry/blob/main/docs/runbooks.md").TargetBlank(true).Icon("doc")).
		WithVariable(gd.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(queryVariable("namespace", "Namespace", labelValues("mongoferry_synctask_info", "namespace"))).
		WithVariable(queryVariable("task", "SyncTask", labelValues(`mongoferry_synctask_info{namespace="$namespace"}`, "synctask")))
	b = taskRow(b)
	b = progressRow(b)
	b = throughputRow(b)
	b = errorsRow(b)
	b = cutoverRow(b)
	return b.Build()
}

// m and w fill a query's selector: the manager's series (mongoferry_synctask_*)
// or the workers'.
func m(f string) string { return fmt.Sprintf(f, managerSel) }
func w(f string) string { return fmt.Sprintf(f, workerSel) }

// taskRow adds the row of the task at a glance: phase, copy progress, lag, checkpoint age, rate and health.
func taskRow(b *gd.DashboardBuilder) *gd.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return b.WithRow(row(1, "Task")).
		WithPanel(statPanel(2, "Phase", "The SyncTask's status.phase (mongoferry_synctask_phase == 1).", "", "blue", nil,
			query{m(`max by (phase) (mongoferry_synctask_phase{%s}) == 1`), "{{phase}}"})).
		WithPanel(gauge.NewPanelBuilder().Id(3).Title("Copy progress").Description("Full copy progress from status.progress: 100% once every range is copied.").
			Datasource(ds).Span(4).Height(4).Unit("percentunit").Min(0).Max(1).Thresholds(thresholds("blue", 1, "green")).
			ReduceOptions(lastValue()).ShowThresholdMarkers(false).
			Targets(targets(true, query{m(`max(mongoferry_synctask_progress_ratio{%s})`), "progress"}))).
		WithPanel(statPanel(4, "Lag", "How far the target is behind the source (status.lagSeconds, the largest over shards). Ready below 30 s. No data while the lag is unknown (status.lagUnknown: a worker has not read the source's newest position yet).", "s", "",
			thresholds("green", 30, "orange", 60, "red"), query{m(`max(mongoferry_synctask_lag_seconds{%s})`), "lag"})).
		WithPanel(statPanel(5, "Checkpoint age", "Now minus the source time up to which every shard's changes are applied and saved (status.checkpointTime).", "s", "",
			thresholds("green", 120, "orange", 600, "red"), query{m(`time() - max(mongoferry_synctask_checkpoint_timestamp_seconds{%s})`), "checkpoint age"})).
		WithPanel(statPanel(6, "Applied ops/s", "Changes applied to the target per second, summed over shards (status.opsPerSecond).", "ops", "", nil,
			query{m(`max(mongoferry_synctask_ops_per_second{%s})`), "ops/s"})).
		WithPanel(statPanel(7, "Degraded", "The Degraded condition's reason while it is True (OplogWindowLost, WorkerFailing, ...); Healthy otherwise.", "", "green", nil,
			query{m(`max by (reason) (mongoferry_synctask_condition{%s, type="Degraded"})`), "{{reason}}"}))
}

// progressRow adds the row of progress and lag over time, per shard, and the oplog's headroom.
func progressRow(b *gd.DashboardBuilder) *gd.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return b.WithRow(row(8, "Progress and lag")).
		WithPanel(graph(9, "Copy progress and documents/s", "Full copy progress (status.progress) and documents copied per second (workers).", "percentunit",
			query{m(`max(mongoferry_synctask_progress_ratio{%s})`), "progress"},
			query{w(`sum(rate(mongoferry_copy_documents_total{%s}[$__rate_interval]))`), "documents/s"}).Min(0).
			OverrideByName("documents/s", []gd.DynamicConfigValue{{Id: "unit", Value: "short"}, {Id: "custom.axisPlacement", Value: "right"}})).
		WithPanel(graph(10, "Lag over time", "Seconds the target is behind the source: the task's (largest over shards, from its status) and each worker's own.", "s",
			query{m(`max(mongoferry_synctask_lag_seconds{%s})`), "task"},
			query{w(`max by (pod) (mongoferry_replay_lag_seconds{%s})`), "{{pod}}"})).
		WithPanel(graph(11, "Lag per shard", "status.shards[].lagSeconds: one line per shard (a sharded source) or per worker pod (a replica set).", "s",
			query{m(`max by (shard) (mongoferry_synctask_shard_lag_seconds{%s})`), "{{shard}}"})).
		WithPanel(graph(12, "Checkpoint age over time", "Now minus the checkpoint's source time. It grows while replay is stuck; on MongoDB it stays within seconds even when the source is idle (periodic no-ops).", "s",
			query{m(`time() - max(mongoferry_synctask_checkpoint_timestamp_seconds{%s})`), "task"},
			query{w(`time() - max by (pod) (mongoferry_replay_checkpoint_timestamp_seconds{%s})`), "{{pod}}"})).
		WithPanel(heatmap.NewPanelBuilder().Id(21).Title("Lag per shard heatmap").
			Description("Each shard's lag as a row of cells over time (status.shards[].lagSeconds): which shard falls behind, and when.").
			Datasource(ds).Span(12).Height(8).Unit("s").Calculate(false).
			Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").Steps(64)).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit("short")).
			Targets(targets(false, query{m(`max by (shard) (mongoferry_synctask_shard_lag_seconds{%s})`), "{{shard}}"}))).
		WithPanel(graph(22, "Time to catch up", "At the rate the lag shrinks now, seconds until the target has caught up: 0 when it has (lag of at most 5 s: whole seconds, and a source whose oplog can show entries out of order, such as FerretDB, has them applied once 2 s old, so a task keeping up with a steady load reads 1-3 s); no value while a larger lag holds or grows.", "s",
			query{m(`(max(mongoferry_synctask_lag_seconds{%[1]s}) <= 5) * 0 or (max(mongoferry_synctask_lag_seconds{%[1]s}) / (max(-deriv(mongoferry_synctask_lag_seconds{%[1]s}[$__rate_interval])) > 0))`), "time to catch up"})).
		WithPanel(graph(23, "Oplog headroom", "Per source oplog (shard): seconds between its oldest entry and the task's checkpoint (what a restart resumes from), and the oplog's time span. When the headroom reaches 0 the window is lost (MongoFerryOplogHeadroomLow warns first).", "s",
			query{w(`min by (shard) (mongoferry_source_oplog_headroom_seconds{%s})`), "headroom {{shard}}"},
			query{w(`max by (shard) (mongoferry_source_oplog_span_seconds{%s})`), "span {{shard}}"}))
}

// throughputRow adds the row of applied operations, bytes, buffers, write latency, batching and held writes.
func throughputRow(b *gd.DashboardBuilder) *gd.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return b.WithRow(row(13, "Throughput")).
		WithPanel(graph(14, "Applied ops/s by operation", "Oplog operations applied to the target per second, by kind (insert, update, delete, ddl, transaction).", "ops",
			query{w(`sum by (op) (rate(mongoferry_replay_applied_ops_total{%s}[$__rate_interval]))`), "{{op}}"})).
		WithPanel(graph(15, "Bytes/s", "Document bytes the full copy writes to the target per second.", "Bps",
			query{w(`sum(rate(mongoferry_copy_bytes_total{%s}[$__rate_interval]))`), "copy"})).
		WithPanel(graph(16, "Buffered bytes", "Bytes in flight between readers and writers: the copy's queue against its budget (cache.maxBytes less cursor and write buffers), and oplog entries read and not yet applied.", "bytes",
			query{w(`sum(mongoferry_cache_buffered_bytes{%s})`), "copy queue"},
			query{w(`sum(mongoferry_cache_max_bytes{%s})`), "copy budget"},
			query{w(`sum(mongoferry_replay_buffered_bytes{%s})`), "replay"})).
		WithPanel(graph(17, "Write latency p50 / p99", "Duration of one write batch on the target, by operation (insert for the copy).", "s",
			query{w(`histogram_quantile(0.5, sum by (le, op) (rate(mongoferry_write_batch_duration_seconds_bucket{%s}[$__rate_interval])))`), "p50 {{op}}"},
			query{w(`histogram_quantile(0.99, sum by (le, op) (rate(mongoferry_write_batch_duration_seconds_bucket{%s}[$__rate_interval])))`), "p99 {{op}}"})).
		WithPanel(graph(24, "Writes per command", "Replay writes carried by each write command sent to the target: how well replay batches.", "short",
			query{w(`sum(rate(mongoferry_replay_writes_sent_total{%[1]s}[$__rate_interval])) / sum(rate(mongoferry_replay_write_commands_total{%[1]s}[$__rate_interval]))`), "writes/command"})).
		WithPanel(graph(25, "Held writes", "Writes each shard's worker holds back after chunk migrations until the other shards' workers have applied up to them (sharded sources; 0 otherwise).", "short",
			query{m(`max by (shard) (mongoferry_synctask_shard_held_writes{%s})`), "{{shard}}"}))
}

// errorsRow adds the row of retries, tolerated conflicts, worker restarts and verification mismatches.
func errorsRow(b *gd.DashboardBuilder) *gd.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return b.WithRow(row(18, "Errors")).
		WithPanel(graph(19, "Errors and retries", "Write batches retried after a retryable error, duplicate keys stepped over in the copy/replay overlap, and worker restarts.", "short",
			query{w(`sum(rate(mongoferry_write_retries_total{%s}[$__rate_interval]))`), "write retries/s"},
			query{w(`sum(rate(mongoferry_replay_tolerated_conflicts_total{%s}[$__rate_interval]))`), "tolerated conflicts/s"},
			query{m(`sum(increase(mongoferry_synctask_worker_restarts_total{%s}[$__rate_interval]))`), "worker restarts"})).
		WithPanel(graph(20, "Worker restarts", "Restart count of each worker pod's worker container.", "short",
			query{m(`max by (pod) (mongoferry_synctask_worker_restarts_total{%s})`), "{{pod}}"})).
		WithPanel(statPanel(26, "Verification mismatches", "Namespaces whose target differed from the source at the last verification (0 when it matched; no value before one has run).", "", "", thresholds("green", 1, "red"),
			query{w(`max(mongoferry_verify_differing_namespaces{%s})`), "namespaces"}).Span(12).Height(8))
}

// cutoverRow adds the row of the cut-over's step and whether source writes are blocked.
func cutoverRow(b *gd.DashboardBuilder) *gd.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return b.WithRow(row(27, "Cut-over")).
		WithPanel(statPanel(28, "Cut-over step", "The step a requested cut-over is at, over the workers: CatchingUp, BlockingWrites, Draining, Verifying, Finalizing, Complete or Failed (no value before one is requested).", "", "blue", nil,
			query{w(`max by (step) (mongoferry_cutover_step{%s}) == 1`), "{{step}}"}).Span(12).Height(4)).
		WithPanel(statPanel(29, "Source writes blocked", "1 once the cut-over has blocked the application's writes on the source (setUserWriteBlockMode); they stay blocked after it (no value before a cut-over is requested).", "", "", thresholds("green", 1, "orange"),
			query{w(`max(mongoferry_cutover_source_writes_blocked{%s})`), "blocked"}).Span(12).Height(4))
}

// JSON returns the dashboard as the chart ships it.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
