package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Variables the operator sets on the workers of a sharded source (see
// controllers/shards.go): the shard mapping, a JSON list of shard names by
// pod ordinal, and the pod's name, whose ordinal picks the worker's shard.
const (
	shardMapEnv = "MONGOFERRY_SHARD_MAP"
	podNameEnv  = "MONGOFERRY_POD_NAME"
)

// workerShard returns the shard this process replays: --shard (or
// MONGOFERRY_SHARD) when given, else the entry of the pod's ordinal in
// MONGOFERRY_SHARD_MAP, else "" (every shard). The pod's name comes from
// MONGOFERRY_POD_NAME, or the hostname, which is the pod's name in a
// StatefulSet.
func workerShard(flag string, getenv func(string) string, hostname func() (string, error)) (string, error) {
	if flag != "" {
		return flag, nil
	}
	raw := getenv(shardMapEnv)
	if strings.TrimSpace(raw) == "" {
		return "", nil
	}
	var names []string
	if err := json.Unmarshal([]byte(raw), &names); err != nil {
		return "", fmt.Errorf("$%s: not a JSON list of shard names: %w", shardMapEnv, err)
	}
	pod := getenv(podNameEnv)
	if pod == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("$%s is unset and the hostname is unknown: %w", podNameEnv, err)
		}
		pod = h
	}
	i := strings.LastIndexByte(pod, '-')
	ord, err := strconv.Atoi(pod[i+1:])
	if i < 0 || err != nil || ord < 0 {
		return "", fmt.Errorf("pod name %q does not end in a StatefulSet ordinal (-N): cannot pick a shard from $%s", pod, shardMapEnv)
	}
	if ord >= len(names) || names[ord] == "" {
		return "", fmt.Errorf("pod %s: no shard is mapped to ordinal %d yet ($%s lists %d): the operator maps it once it has discovered the shard; the worker restarts and reads the mapping again",
			pod, ord, shardMapEnv, len(names))
	}
	return names[ord], nil
}

// osHostname is os.Hostname, replaceable in tests.
var osHostname = os.Hostname
