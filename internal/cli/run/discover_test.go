package run

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"sigs.k8s.io/yaml"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestDiscoverSource asks real servers what they are: a FerretDB server
// (a replica set to the engine) and the sharded cluster stand-in of
// testserver.Cluster (FerretDB servers as shards, one as mongos holding
// config.shards; its hello does not say isdbgrid, so kind sharded says
// what it is).
func TestDiscoverSource(t *testing.T) {
	rs := testserver.Start(t)
	c := testserver.StartCluster(t, 2)
	tests := []struct {
		name    string
		source  config.Endpoint
		sharded bool
		shards  []string
	}{
		{"replica set", config.Endpoint{URI: rs.URI}, false, nil},
		{"sharded cluster", c.Source(), true, slices.Sorted(slices.Values(c.Names))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sharded, shards, err := discoverSource(tt.source)(t.Context())
			if err != nil || sharded != tt.sharded || !slices.Equal(shards, tt.shards) {
				t.Errorf("discovered sharded=%v shards=%v err=%v, want sharded=%v shards=%v", sharded, shards, err, tt.sharded, tt.shards)
			}
		})
	}
}

// script is a discoverFunc that answers from a list, repeating its last
// answer, and counts the calls.
type script struct {
	mu      sync.Mutex
	answers []answer
	calls   int
}

type answer struct {
	sharded bool
	shards  []string
	err     error
}

func (s *script) discover(context.Context) (bool, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	return a.sharded, a.shards, a.err
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestAwaitShardMap: the first worker of a task, with no shard of its own,
// discovers the source. A replica set: it goes on to run the task. A
// sharded source: it copies and replays nothing, serves /status (phase
// Pending, the shards, awaitingShardMap; read as the controller reads it)
// and discovers again, keeping the last known shards when a discovery
// fails, until it is stopped. A first discovery that fails ends it.
func TestAwaitShardMap(t *testing.T) {
	unreachable := errors.New("source: deployment unreachable")
	tests := []struct {
		name     string
		answers  []answer
		waits    bool
		wantErr  error
		wantTopo workerapi.Topology // when it waits: the topology /status shows at the end
	}{
		{"replica set: runs the task", []answer{{sharded: false}}, false, nil, workerapi.Topology{}},
		{"first discovery fails", []answer{{err: unreachable}}, false, unreachable, workerapi.Topology{}},
		{"sharded: waits", []answer{{sharded: true, shards: []string{"rs0", "rs1"}}}, true, nil,
			workerapi.Topology{Sharded: true, Shards: []string{"rs0", "rs1"}, AwaitingShardMap: true}},
		{"sharded, then a failed discovery: shards kept, error shown", []answer{{sharded: true, shards: []string{"rs0"}}, {err: unreachable}}, true, nil,
			workerapi.Topology{Sharded: true, Shards: []string{"rs0"}, AwaitingShardMap: true, Error: unreachable.Error()}},
		{"sharded, a shard joins while it waits", []answer{{sharded: true, shards: []string{"rs0"}}, {sharded: true, shards: []string{"rs0", "rs1"}}}, true, nil,
			workerapi.Topology{Sharded: true, Shards: []string{"rs0", "rs1"}, AwaitingShardMap: true}},
	}
	task := &config.Task{Name: "orders", Spec: config.Spec{Mode: config.ModeFullAndIncremental}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{answers: tt.answers}
			w := newWatcher(s.discover, 10*time.Millisecond, slog.New(slog.DiscardHandler))
			f := Flags{listen: testutil.FreeAddr(t)}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				waited bool
				err    error
			}
			done := make(chan result, 1)
			go func() {
				waited, err := awaitShardMap(ctx, task, w, f, slog.New(slog.DiscardHandler))
				done <- result{waited, err}
			}()
			if !tt.waits {
				r := <-done
				if r.waited || !errors.Is(r.err, tt.wantErr) {
					t.Errorf("waited %v, err %v; want false, %v", r.waited, r.err, tt.wantErr)
				}
				return
			}
			// It discovers again while it waits.
			deadline := time.Now().Add(10 * time.Second)
			for s.count() < len(tt.answers)+1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			st := readStatus(t, f.listen)
			cancel()
			r := <-done
			var code exit.Error
			if !r.waited || !errors.As(r.err, &code) || code.Code != workerapi.ExitInterrupted {
				t.Errorf("waited %v, err %v; want true and exit code %d", r.waited, r.err, workerapi.ExitInterrupted)
			}
			if st.Phase != workerapi.PhasePending || st.Task != "orders" || st.Contract != workerapi.ContractVersion || st.Replay != nil {
				t.Errorf("/status phase %s task %q contract %d replay %v", st.Phase, st.Task, st.Contract, st.Replay)
			}
			got := st.Topology
			if got == nil || got.DiscoveredAt.IsZero() || got.AttemptedAt.Before(got.DiscoveredAt) {
				t.Fatalf("/status topology %+v", got)
			}
			got.DiscoveredAt, got.AttemptedAt = time.Time{}, time.Time{}
			if !equalTopology(*got, tt.wantTopo) {
				t.Errorf("/status topology %+v, want %+v", *got, tt.wantTopo)
			}
		})
	}
}

func equalTopology(a, b workerapi.Topology) bool {
	return a.Sharded == b.Sharded && slices.Equal(a.Shards, b.Shards) && a.Error == b.Error && a.AwaitingShardMap == b.AwaitingShardMap &&
		a.DiscoveredAt.Equal(b.DiscoveredAt) && a.AttemptedAt.Equal(b.AttemptedAt)
}

// readStatus reads a worker's /status as the controller does.
func readStatus(t *testing.T, addr string) workerapi.Status {
	t.Helper()
	var st workerapi.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/status")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err = json.Unmarshal(b, &st); err == nil {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunAwaitsShardMap runs `ferry run --await-shard-map` against real
// servers, as the operator's first worker: on the sharded cluster
// stand-in (FerretDB shards and mongos, as in TestDiscoverSource) it
// reports the shards and writes nothing to the target, not even a
// checkpoint, until it is stopped; on a replica set (one FerretDB server)
// it runs the task, and the target ends equal to the source.
func TestRunAwaitsShardMap(t *testing.T) {
	c := testserver.StartCluster(t, 2)
	rs := testserver.Start(t)
	seed := []bson.D{{{Key: "_id", Value: int64(1)}, {Key: "v", Value: "a"}}, {{Key: "_id", Value: int64(7)}, {Key: "v", Value: "b"}}}
	if err := c.Insert(t.Context(), "app.items", seed...); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.MustClient(t).Database("app").Collection("items").InsertMany(t.Context(), seed); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		source config.Endpoint
		waits  bool
	}{
		{"sharded: waits, writes nothing", c.Source(), true},
		{"replica set: runs the task", config.Endpoint{URI: rs.URI}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := testserver.Start(t)
			task := config.Task{Name: "orders", Spec: config.Spec{Mode: config.ModeFull, Source: tt.source, Target: config.Endpoint{URI: dst.URI}}}
			raw, err := yaml.Marshal(&task)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "task.yaml")
			if err := os.WriteFile(file, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			f := Flags{file: file, listen: testutil.FreeAddr(t), progress: "none", logFormat: "text", logLevel: "warn",
				awaitShardMap: true, discoverEvery: 50 * time.Millisecond}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Run(ctx, f) }()
			target := dst.MustClient(t)
			if !tt.waits {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("run: %v", err)
					}
				case <-time.After(2 * time.Minute):
					t.Fatal("the run did not end")
				}
				n, err := target.Database("app").Collection("items").CountDocuments(t.Context(), bson.D{})
				if err != nil || n != int64(len(seed)) {
					t.Errorf("target has %d documents (%v), want the source's %d", n, err, len(seed))
				}
				return
			}
			var st workerapi.Status
			deadline := time.Now().Add(30 * time.Second)
			for st = readStatus(t, f.listen); st.Topology == nil && time.Now().Before(deadline); st = readStatus(t, f.listen) {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // several discoveries: still waiting
			st = readStatus(t, f.listen)
			if tp := st.Topology; tp == nil || !tp.AwaitingShardMap || !tp.Sharded || !slices.Equal(tp.Shards, slices.Sorted(slices.Values(c.Names))) || st.Phase != workerapi.PhasePending {
				t.Errorf("/status phase %s topology %+v, want Pending, awaiting a shard mapping of %v", st.Phase, st.Topology, c.Names)
			}
			dbs, err := target.ListDatabaseNames(t.Context(), bson.D{})
			if err != nil {
				t.Fatal(err)
			}
			for _, db := range dbs {
				if db != "admin" && db != "config" && db != "local" {
					t.Errorf("the waiting worker wrote database %s on the target", db)
				}
			}
			cancel()
			var code exit.Error
			if err := <-done; !errors.As(err, &code) || code.Code != workerapi.ExitInterrupted {
				t.Errorf("stopped with %v, want exit code %d", err, workerapi.ExitInterrupted)
			}
		})
	}
}
