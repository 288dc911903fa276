package cutover

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// fakeStore keeps the records in memory and every cut-over step in the
// order recorded.
type fakeStore struct {
	mu     sync.Mutex
	task   checkpoint.TaskRecord
	shards map[string]checkpoint.ShardRecord
	steps  []string
}

func (s *fakeStore) SetCutover(_ context.Context, c checkpoint.CutoverRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.task.Cutover = &c
	if n := len(s.steps); n == 0 || s.steps[n-1] != c.Step {
		s.steps = append(s.steps, c.Step)
	}
	return nil
}

func (s *fakeStore) Task(context.Context) (checkpoint.TaskRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.task, nil
}

func (s *fakeStore) Shards(context.Context) (map[string]checkpoint.ShardRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]checkpoint.ShardRecord, len(s.shards))
	for k, v := range s.shards {
		out[k] = v
	}
	return out, nil
}

func (s *fakeStore) SetShardCutover(_ context.Context, name string, c checkpoint.ShardCutover) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.shards[name]
	rec.Cutover = &c
	s.shards[name] = rec
	return nil
}

// fakeReplay is a replay caught up to at, with nothing in flight.
type fakeReplay struct{ at bson.Timestamp }

func (r fakeReplay) Status() replay.Status {
	return replay.Status{NewestKnown: true, NewestTS: r.at, AppliedTS: r.at}
}
func (r fakeReplay) Checkpoint() bson.Timestamp { return r.at }

// fakeSource is a source whose newest entry is newest (per shard when
// shards is set); blockErr fails the write block.
type fakeSource struct {
	newest   bson.Timestamp
	shards   map[string]bson.Timestamp
	blockErr error
	blocked  int
	reads    int
}

func (s *fakeSource) BlockWrites(context.Context) error {
	if s.blockErr != nil {
		return s.blockErr
	}
	s.blocked++
	return nil
}

func (s *fakeSource) NewestTS(_ context.Context, shard string) (bson.Timestamp, error) {
	s.reads++
	if shard != "" {
		return s.shards[shard], nil
	}
	return s.newest, nil
}

// fakeTarget answers the steps after the drain; calls names them in
// order.
type fakeTarget struct {
	differing   []string
	finalizeErr error
	late        string
	calls       []string
}

func (t *fakeTarget) CheckDrained(context.Context, checkpoint.CutoverRecord) error {
	t.calls = append(t.calls, "check")
	return nil
}

func (t *fakeTarget) Verify(context.Context, config.VerifyMode) ([]string, error) {
	t.calls = append(t.calls, "verify")
	return t.differing, nil
}

func (t *fakeTarget) WritesAfterDrain(context.Context, checkpoint.CutoverRecord) string {
	return t.late
}

func (t *fakeTarget) Finalize(context.Context) error {
	t.calls = append(t.calls, "finalize")
	return t.finalizeErr
}

func (t *fakeTarget) Position(context.Context) (bson.Timestamp, error) {
	t.calls = append(t.calls, "position")
	return bson.Timestamp{T: 900, I: 1}, nil
}

// fakeSubtask is one shard's replay caught up to at.
type fakeSubtask struct {
	name    string
	at      bson.Timestamp
	store   *fakeStore
	stopped bool
	shown   checkpoint.ShardCutover
}

func (s *fakeSubtask) Shard() string                        { return s.name }
func (s *fakeSubtask) Replay() Replay                       { return fakeReplay{at: s.at} }
func (s *fakeSubtask) SetCutover(c checkpoint.ShardCutover) { s.shown = c }

func (s *fakeSubtask) StopDrained(ctx context.Context, c checkpoint.ShardCutover) error {
	s.stopped = true
	c.Drained = true
	s.store.mu.Lock()
	rec := s.store.shards[s.name]
	rec.AppliedTS = s.at
	s.store.shards[s.name] = rec
	s.store.mu.Unlock()
	return s.store.SetShardCutover(ctx, s.name, c)
}
