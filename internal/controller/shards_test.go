package controller

import (
	"slices"
	"testing"
	"time"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestShardTopology: the controller takes the source's topology from the
// workers' /status, the most recent attempt of any worker; none known
// while no worker reports one; a failed attempt is an error that keeps the
// mapping (TestPlanShards); a task whose workers cannot run one shard each
// runs one worker whatever they report.
func TestShardTopology(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	report := func(sharded bool, shards []string, attempted time.Time, err string) *workerapi.Status {
		return &workerapi.Status{Topology: &workerapi.Topology{Sharded: sharded, Shards: shards, DiscoveredAt: at, AttemptedAt: attempted, Error: err}}
	}
	tests := []struct {
		name    string
		kind    config.ClusterKind
		reports []*workerapi.Status
		want    discovery
		wantErr string
	}{
		{"no worker reports", config.KindAuto, nil, discovery{}, ""},
		{"reports without a topology (older workers)", config.KindAuto, []*workerapi.Status{{Phase: workerapi.PhaseStreaming}, nil}, discovery{}, ""},
		{"replica set", config.KindAuto, []*workerapi.Status{report(false, nil, at, "")}, discovery{known: true}, ""},
		{"the most recent attempt wins", config.KindSharded, []*workerapi.Status{
			report(true, []string{"a", "b"}, at.Add(2*time.Second), ""),
			report(true, []string{"a", "b", "c"}, at.Add(3*time.Second), ""),
			report(true, []string{"a"}, at.Add(time.Second), ""),
		}, discovery{known: true, sharded: true, names: []string{"a", "b", "c"}}, ""},
		{"the most recent attempt failed", config.KindSharded, []*workerapi.Status{
			report(true, []string{"a", "b"}, at, ""),
			report(true, []string{"a", "b"}, at.Add(time.Second), "source: deployment unreachable"),
		}, discovery{known: true, sharded: true, names: []string{"a", "b"}}, "source: deployment unreachable"},
		{"kind replicaSet: one worker whatever is reported", config.KindReplicaSet, []*workerapi.Status{report(true, []string{"a"}, at, "")}, discovery{known: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := &syncv1alpha1.SyncTask{}
			task.Spec.Source.Kind = tt.kind
			var obs []workerObservation
			for _, r := range tt.reports {
				obs = append(obs, workerObservation{report: r})
			}
			got := (&SyncTaskReconciler{}).shardTopology(task, obs)
			gotErr := ""
			if got.err != nil {
				gotErr = got.err.Error()
			}
			if got.known != tt.want.known || got.sharded != tt.want.sharded || !slices.Equal(got.names, tt.want.names) || gotErr != tt.wantErr {
				t.Errorf("discovery %+v, want %+v (error %q)", got, tt.want, tt.wantErr)
			}
		})
	}
}
