package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// One worker per shard: the controller keeps which pod replays which shard
// of a sharded source in status.shards[] (pod ordinal N runs the shard of
// ordinal N; ordinals are given once and never change), from the shards
// the workers discover and report in /status, and hands the mapping to the
// workers through the worker Secret (MONGOFERRY_SHARD_MAP). The discovery,
// the first worker's --await-shard-map, added and removed shards:
// docs/operator.md, "Sharded sources".

// Shard mapping keys and variables.
const (
	// ShardMapKey is the key of the shard mapping in the worker Secret.
	ShardMapKey = "shards"
	// ShardMapEnv is the worker's variable holding the shard mapping.
	ShardMapEnv = workerapi.EnvShardMap
	// PodNameEnv is the worker's variable holding its pod name, whose
	// ordinal picks the worker's entry of the shard mapping.
	PodNameEnv = workerapi.EnvPodName
	// ShardedAnnotation on the pod template is "true" once the workers
	// run one shard each: switching to it restarts a worker that started
	// before the shards were known.
	ShardedAnnotation = "sync.mongoferry.io/sharded"
	// DefaultShardRefreshInterval is how often the workers of a task
	// whose source may be sharded discover its shards again when
	// ShardRefreshInterval is zero.
	DefaultShardRefreshInterval = 30 * time.Second
)

// TopologyReader says what the task's source is from its workers'
// reports: the topology of the report whose discovery was attempted last.
// known is false while no worker has reported one.
type TopologyReader func(task *syncv1alpha1.SyncTask, reports []*workerapi.Status) (t workerapi.Topology, known bool)

// ReportedTopology is the TopologyReader that reads the workers' /status:
// of the reports that carry a topology, the most recent attempt.
func ReportedTopology(_ *syncv1alpha1.SyncTask, reports []*workerapi.Status) (workerapi.Topology, bool) {
	var last *workerapi.Topology
	for _, r := range reports {
		if r == nil || r.Topology == nil || r.Topology.AttemptedAt.IsZero() {
			continue
		}
		if last == nil || r.Topology.AttemptedAt.After(last.AttemptedAt) {
			last = r.Topology
		}
	}
	if last == nil {
		return workerapi.Topology{}, false
	}
	return *last, true
}

// readsShards says whether a task's workers may run one shard each: an
// oplog replay from a source that is or may be sharded.
func readsShards(task *syncv1alpha1.SyncTask) bool {
	s := &task.Spec
	return s.Source.Kind != config.KindReplicaSet && s.Mode != config.ModeFull && s.Incremental.Method != config.MethodChangeStream
}

// discovery is what the workers last reported of the source.
type discovery struct {
	// known: a worker has reported a discovery.
	known   bool
	sharded bool
	names   []string
	err     error
}

// shardTopology is the source's topology as the task's workers reported
// it.
func (r *SyncTaskReconciler) shardTopology(task *syncv1alpha1.SyncTask, workers []workerObservation) discovery {
	if !readsShards(task) {
		return discovery{known: true} // one worker, whatever the source
	}
	read := r.ReadTopology
	if read == nil {
		read = ReportedTopology
	}
	reports := make([]*workerapi.Status, 0, len(workers))
	for _, w := range workers {
		if w.report != nil {
			reports = append(reports, w.report)
		}
	}
	t, known := read(task, reports)
	if !known {
		return discovery{}
	}
	d := discovery{known: true, sharded: t.Sharded, names: t.Shards}
	if t.Error != "" {
		d.err = errors.New(t.Error)
	}
	return d
}

// refreshInterval is how often the workers discover the source again.
func (r *SyncTaskReconciler) refreshInterval() time.Duration {
	if r.ShardRefreshInterval > 0 {
		return r.ShardRefreshInterval
	}
	return DefaultShardRefreshInterval
}

// shardEntry is one shard of the plan.
type shardEntry struct {
	name    string
	ordinal int32
	// removed: the shard is no longer in config.shards.
	removed bool
}

// shardPlan says which worker replays which shard.
type shardPlan struct {
	// entries, by ordinal; nil when the task runs one worker (a replica
	// set, or shards not known yet).
	entries []shardEntry
	// added and removed are the shards that joined or left since the last
	// status (none at the first discovery).
	added, removed []string
	// first is true when this discovery gave the first mapping.
	first bool
	// err is a failed discovery while a mapping exists: it is kept.
	err error
}

// planShards merges a discovery into the mapping kept in the previous
// status. A failed discovery keeps the previous mapping; with none, the
// task runs one worker, which reports what is wrong with the source.
func planShards(task *syncv1alpha1.SyncTask, prev []syncv1alpha1.ShardStatus, d discovery) shardPlan {
	var old []shardEntry
	for _, s := range prev {
		if s.Name == WorkerName(task.Name)+"-0" {
			continue // the entry of a task run by one worker
		}
		old = append(old, shardEntry{name: s.Name, ordinal: s.Ordinal, removed: s.Removed})
	}
	slices.SortFunc(old, func(a, b shardEntry) int { return int(a.ordinal - b.ordinal) })
	switch {
	case !d.known && len(old) > 0:
		// No worker reports (stopped, starting): the mapping stands.
		return shardPlan{entries: old}
	case d.err != nil && len(old) > 0:
		return shardPlan{entries: old, err: d.err}
	case d.err != nil || !d.sharded:
		return shardPlan{}
	}
	p := shardPlan{first: len(old) == 0}
	next := int32(0)
	for _, e := range old {
		next = max(next, e.ordinal+1)
		listed := slices.Contains(d.names, e.name)
		switch {
		case !listed && !e.removed:
			p.removed = append(p.removed, e.name)
		case listed && e.removed:
			p.added = append(p.added, e.name)
		}
		e.removed = !listed
		p.entries = append(p.entries, e)
	}
	names := slices.Clone(d.names)
	slices.Sort(names)
	for _, n := range names {
		if slices.ContainsFunc(old, func(e shardEntry) bool { return e.name == n }) {
			continue
		}
		p.entries = append(p.entries, shardEntry{name: n, ordinal: next})
		next++
		if !p.first {
			p.added = append(p.added, n)
		}
	}
	return p
}

// replicas is the number of worker pods the plan needs: up to the highest
// ordinal, less removed shards at the end whose workers have retired.
func (p shardPlan) replicas(prev []syncv1alpha1.ShardStatus) int32 {
	if p.entries == nil {
		return 1
	}
	retired := map[string]bool{}
	for _, s := range prev {
		retired[s.Name] = s.Phase == syncv1alpha1.PhaseRetired
	}
	n := int32(0)
	for _, e := range p.entries {
		if !e.removed || !retired[e.name] {
			n = max(n, e.ordinal+1)
		}
	}
	return n
}

// shardSlot is one entry of the mapping the workers read (`ferry run`
// parses the same shape).
type shardSlot struct {
	Name string `json:"name"`
	// Retired: the shard left the cluster and its worker applied its oplog
	// to the end; a worker restarted on this slot idles.
	Retired bool `json:"retired,omitempty"`
}

// shardMap is the mapping the workers read: shards by ordinal.
func (p shardPlan) shardMap(prev []syncv1alpha1.ShardStatus) []byte {
	if p.entries == nil {
		return nil
	}
	retired := map[string]bool{}
	for _, s := range prev {
		retired[s.Name] = s.Phase == syncv1alpha1.PhaseRetired
	}
	n := int32(0)
	for _, e := range p.entries {
		n = max(n, e.ordinal+1)
	}
	slots := make([]shardSlot, n)
	for _, e := range p.entries {
		slots[e.ordinal] = shardSlot{Name: e.name, Retired: e.removed && retired[e.name]}
	}
	b, _ := json.Marshal(slots) // strings and booleans always marshal
	return b
}

// names are the plan's shard names, by ordinal.
func (p shardPlan) names() []string {
	out := make([]string, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.name
	}
	return out
}

// nameOf is the shard replayed by the pod of an ordinal, "" when none.
func (p shardPlan) nameOf(ordinal int) string {
	for _, e := range p.entries {
		if int(e.ordinal) == ordinal {
			return e.name
		}
	}
	return ""
}

// shardEvents tells the shards found, added and removed.
func (r *SyncTaskReconciler) shardEvents(task *syncv1alpha1.SyncTask, p shardPlan) {
	name := WorkerName(task.Name)
	if p.first && len(p.entries) > 0 {
		parts := make([]string, len(p.entries))
		for i, e := range p.entries {
			parts[i] = fmt.Sprintf("%s (pod %s-%d)", e.name, name, e.ordinal)
		}
		r.event(task, corev1.EventTypeNormal, syncv1alpha1.ReasonShardsDiscovered, "Discover", "the source has %d shards, one worker each: %s",
			len(p.entries), strings.Join(parts, ", "))
	}
	for _, n := range p.added {
		r.event(task, corev1.EventTypeNormal, syncv1alpha1.ReasonShardAdded, "Scale", "shard %s joined the source cluster: pod %s-%d replays its oplog from its first entry",
			n, name, p.ordinalOf(n))
	}
	for _, n := range p.removed {
		r.event(task, corev1.EventTypeNormal, syncv1alpha1.ReasonShardRemoved, "Scale", "shard %s left the source cluster: pod %s-%d reads its oplog to the end, then retires",
			n, name, p.ordinalOf(n))
	}
}

func (p shardPlan) ordinalOf(name string) int32 {
	for _, e := range p.entries {
		if e.name == name {
			return e.ordinal
		}
	}
	return -1
}

// summaryWords name the phases in the shard summary.
var summaryWords = map[syncv1alpha1.Phase]string{
	syncv1alpha1.PhasePending: "pending", syncv1alpha1.PhaseFullSync: "copying", syncv1alpha1.PhaseStreaming: "streaming",
	syncv1alpha1.PhasePaused: "paused", syncv1alpha1.PhaseVerifying: "verifying", syncv1alpha1.PhaseCompleted: "completed",
	syncv1alpha1.PhaseFailed: "failed",
}

// shardSummary reads like "3/3 streaming": the shards whose workers
// stream, out of those not retired; when every shard is in one other
// phase, that phase ("3/3 paused", "1/1 completed").
func shardSummary(shards []syncv1alpha1.ShardStatus) string {
	total, streaming := 0, 0
	same := syncv1alpha1.Phase("")
	for _, s := range shards {
		if s.Phase == syncv1alpha1.PhaseRetired {
			continue
		}
		total++
		if s.Phase == syncv1alpha1.PhaseStreaming {
			streaming++
		}
		if total == 1 || same == s.Phase {
			same = s.Phase
		} else {
			same = "mixed"
		}
	}
	if total == 0 {
		return ""
	}
	if w, ok := summaryWords[same]; ok && same != syncv1alpha1.PhaseStreaming {
		return fmt.Sprintf("%d/%d %s", total, total, w)
	}
	return fmt.Sprintf("%d/%d streaming", streaming, total)
}
