package run

import (
	"errors"
	"strings"
	"testing"
)

func TestWorkerShard(t *testing.T) {
	tests := []struct {
		name, flag, shardMap, pod, host, want, err string
		retired                                    bool
	}{
		{name: "flag wins", flag: "rs9", shardMap: `[{"name":"rs0"}]`, pod: "t-worker-0", want: "rs9"},
		{name: "no mapping: every shard", pod: "t-worker-0", want: ""},
		{name: "ordinal picks", shardMap: `[{"name":"rs0"},{"name":"rs1"},{"name":"rs2"}]`, pod: "orders-worker-2", want: "rs2"},
		{name: "retired", shardMap: `[{"name":"rs0"},{"name":"rs1","retired":true}]`, pod: "orders-worker-1", want: "rs1", retired: true},
		{name: "hostname when no pod name", shardMap: `[{"name":"b"},{"name":"a"}]`, host: "orders-worker-1", want: "a"},
		{name: "ordinal not mapped yet", shardMap: `[{"name":"rs0"}]`, pod: "orders-worker-1", err: "no shard is mapped to ordinal 1"},
		{name: "not a list", shardMap: `{"0":"rs0"}`, pod: "orders-worker-0", err: "not a JSON list"},
		{name: "no ordinal", shardMap: `[{"name":"rs0"}]`, pod: "worker", err: "does not end in a StatefulSet ordinal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{shardMapEnv: tt.shardMap, podNameEnv: tt.pod}
			host := func() (string, error) {
				if tt.host == "" {
					return "", errors.New("no hostname")
				}
				return tt.host, nil
			}
			got, err := workerShard(tt.flag, func(k string) string { return env[k] }, host)
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			case tt.err == "" && err != nil:
				t.Fatal(err)
			case got.Name != tt.want || got.Retired != tt.retired:
				t.Fatalf("shard %+v, want %q (retired %v)", got, tt.want, tt.retired)
			}
		})
	}
}
