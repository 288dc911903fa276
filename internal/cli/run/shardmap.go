package run

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/metrics"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Variables the operator sets on the workers of a sharded source (see
// internal/controller/shards.go): the shard mapping, a JSON list by pod ordinal of
// {"name": shard, "retired": true when the shard left the cluster and its
// oplog is applied to its end}, and the pod's name, whose ordinal picks the
// worker's shard.
const (
	shardMapEnv = workerapi.EnvShardMap
	podNameEnv  = workerapi.EnvPodName
)

// shardSlot is one entry of the shard mapping.
type shardSlot struct {
	Name    string `json:"name"`
	Retired bool   `json:"retired,omitempty"`
}

// workerShard returns the shard this process replays: --shard (or
// MONGOFERRY_SHARD) when given, else the entry of the pod's ordinal in
// MONGOFERRY_SHARD_MAP, else "" (every shard). The pod's name comes from
// MONGOFERRY_POD_NAME, or the hostname, which is the pod's name in a
// StatefulSet.
func workerShard(flag string, getenv func(string) string, hostname func() (string, error)) (shardSlot, error) {
	if flag != "" {
		return shardSlot{Name: flag}, nil
	}
	raw := getenv(shardMapEnv)
	if strings.TrimSpace(raw) == "" {
		return shardSlot{}, nil
	}
	var slots []shardSlot
	if err := json.Unmarshal([]byte(raw), &slots); err != nil {
		return shardSlot{}, fmt.Errorf("$%s: not a JSON list of shards: %w", shardMapEnv, err)
	}
	pod := getenv(podNameEnv)
	if pod == "" {
		h, err := hostname()
		if err != nil {
			return shardSlot{}, fmt.Errorf("$%s is unset and the hostname is unknown: %w", podNameEnv, err)
		}
		pod = h
	}
	i := strings.LastIndexByte(pod, '-')
	ord, err := strconv.Atoi(pod[i+1:])
	if i < 0 || err != nil || ord < 0 {
		return shardSlot{}, fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-N): cannot pick a shard from $%s", pod, shardMapEnv)
	}
	if ord >= len(slots) || slots[ord].Name == "" {
		return shardSlot{}, fmt.Errorf("pod %s: no shard is mapped to ordinal %d yet ($%s lists %d): the operator maps it once it has discovered the shard; the worker restarts and reads the mapping again",
			pod, ord, shardMapEnv, len(slots))
	}
	return slots[ord], nil
}

// idleRetired serves /status (the shard Retired) and /metrics until ctx
// ends: the worker of a shard that left the cluster and whose oplog is
// applied to its end has nothing left to do, but its pod stays while
// shards with higher ordinals run.
func idleRetired(ctx context.Context, task *config.Task, shard string, f Flags, watch *watcher, log *slog.Logger) error {
	status := func() engine.Status {
		return engine.Status{Task: task.Name, Mode: string(task.Mode), Phase: engine.PhaseStreaming,
			Shards: []engine.ShardStatus{{Shard: shard, Phase: engine.SubtaskRetired}}, Topology: watch.snapshot()}
	}
	if f.listen != "" {
		stop, err := serve(f, workerapi.Handler(metrics.HTTPHandler(metrics.NewRegistry()), status, nil), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("the shard left the cluster and its oplog is applied to its end: nothing to do", "shard", shard)
	<-ctx.Done()
	return nil
}

// osHostname is os.Hostname, replaceable in tests.
var osHostname = os.Hostname
