package run

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
	"github.com/mongoferry/mongoferry/pkg/metrics"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Source discovery for the operator (--discover-interval).
//
// The operator's manager does not connect to the source: its workers,
// which do, discover the source's topology (hello, then config.shards
// through the mongos) at start and then at the interval, and report it in
// /status (workerapi.Topology). The controller sizes the StatefulSet and
// writes the shard mapping from those reports.
//
// Before the shards are known the controller runs one worker, ordinal 0,
// with --await-shard-map. That worker discovers first: on a replica set it
// runs the task as usual; on a sharded source it copies and replays
// nothing and only reports what it found (Phase Pending,
// Topology.AwaitingShardMap) until the controller restarts it with the
// mapping. A first discovery that fails ends the worker with the error, as
// a failed connection at the start of a run does.

// discoveryTimeout bounds one discovery.
const discoveryTimeout = 10 * time.Second

// awaitRetry is how often a waiting worker discovers again when its
// interval is longer.
const awaitRetry = 10 * time.Second

// discoverFunc lists the source's shards: whether it is read shard by
// shard and the shards' names.
type discoverFunc func(ctx context.Context) (sharded bool, shards []string, err error)

// discoverSource is the discoverFunc that asks the source, with the
// credentials and TLS files the task file names.
func discoverSource(source config.Endpoint) discoverFunc {
	return func(ctx context.Context) (bool, []string, error) {
		ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
		defer cancel()
		c, err := conn.Open(ctx, "source", source, conn.Options{AppName: "mongoferry", ConnectTimeout: discoveryTimeout})
		if err != nil {
			return false, nil, err
		}
		defer func() { _ = c.Disconnect(context.WithoutCancel(ctx)) }()
		sharded, shards, err := topology.Discover(ctx, c, source)
		if err != nil || !sharded {
			return sharded, nil, err
		}
		names := make([]string, len(shards))
		for i, s := range shards {
			names[i] = s.Name
		}
		slices.Sort(names)
		return true, names, nil
	}
}

// watcher keeps the outcome of the last discoveries for /status.
type watcher struct {
	discover discoverFunc
	every    time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu   sync.Mutex
	last workerapi.Topology
	seen bool
}

func newWatcher(discover discoverFunc, every time.Duration, log *slog.Logger) *watcher {
	return &watcher{discover: discover, every: every, log: log, now: time.Now}
}

// snapshot is the last outcome, nil before the first attempt ends. A
// nil watcher reports nothing.
func (w *watcher) snapshot() *workerapi.Topology {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen {
		return nil
	}
	t := w.last
	t.Shards = slices.Clone(t.Shards)
	return &t
}

// once discovers and records the outcome; a failure keeps the last known
// topology and records the error.
func (w *watcher) once(ctx context.Context) (workerapi.Topology, error) {
	sharded, shards, err := w.discover(ctx)
	at := w.now().UTC()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = true
	w.last.AttemptedAt = at
	if err != nil {
		w.last.Error = err.Error()
		return w.last, err
	}
	if w.last.Sharded != sharded || !slices.Equal(w.last.Shards, shards) {
		w.log.Info("discovered the source", "sharded", sharded, "shards", shards)
	}
	w.last.Sharded, w.last.Shards, w.last.DiscoveredAt, w.last.Error = sharded, shards, at, ""
	return w.last, nil
}

// setAwaiting marks the worker as waiting for its shard mapping.
func (w *watcher) setAwaiting(awaiting bool) {
	w.mu.Lock()
	w.last.AwaitingShardMap = awaiting
	w.mu.Unlock()
}

// run discovers every interval until ctx ends (the first time after one
// interval: the caller has discovered at start).
func (w *watcher) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := w.once(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("cannot discover the source's shards; the last known ones stand", "err", err)
		}
	}
}

// start discovers once (logging a failure) and then every interval in
// the background, until ctx ends.
func (w *watcher) start(ctx context.Context) {
	go func() {
		if _, err := w.once(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("cannot discover the source's shards", "err", err)
		}
		w.run(ctx, w.every)
	}()
}

// awaitShardMap is the start of a worker run with --await-shard-map and no
// shard of its own. It discovers the source: not sharded, it returns false
// and the worker runs the task as usual; sharded, it serves /status
// (Phase Pending, the topology, AwaitingShardMap) and discovers again
// until ctx ends, when the controller restarts it with the mapping. A
// first discovery that fails returns its error.
func awaitShardMap(ctx context.Context, task *config.Task, w *watcher, f Flags, log *slog.Logger) (bool, error) {
	t, err := w.once(ctx)
	if err != nil {
		return false, fmt.Errorf("discover the source: %w", err)
	}
	if !t.Sharded {
		return false, nil
	}
	w.setAwaiting(true)
	started := time.Now().UTC()
	status := func() engine.Status {
		return engine.Status{Contract: workerapi.ContractVersion, Task: task.Name, Mode: string(task.Mode),
			Phase: engine.PhasePending, StartedAt: started, Topology: w.snapshot()}
	}
	if f.listen != "" {
		stop, err := serve(f, workerapi.Handler(metrics.HTTPHandler(metrics.NewRegistry()), status, nil), log)
		if err != nil {
			return true, err
		}
		defer stop()
	}
	log.Info("the source is sharded: waiting for the operator to map a shard to this worker; nothing is copied or replayed until then",
		"task", task.Name, "shards", t.Shards)
	every := w.every
	if every <= 0 || every > awaitRetry {
		every = awaitRetry
	}
	w.run(ctx, every)
	return true, exit.Error{Code: workerapi.ExitInterrupted}
}
