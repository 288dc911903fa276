package checkpoint

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestCutoverStepsSurviveCheckpointSaves: on a real FerretDB target
// (which updates a document by reading it and writing it back whole),
// every cut-over step recorded while two shards' subtasks save their
// checkpoints (each save also updates the task record) reads back as
// recorded, Failed last: the workers that follow the cut-over see it.
func TestCutoverStepsSurviveCheckpointSaves(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	s := NewStore(srv.MustClient(t), "mongoferry", "cut-saves")
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	shards := []string{"shard0", "shard1"}
	for _, sh := range shards {
		if _, err := s.SetShardStart(ctx, sh, bson.Timestamp{T: 100, I: 1}); err != nil {
			t.Fatal(err)
		}
	}
	saveCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, sh := range shards {
		wg.Go(func() {
			store := s.ForShard(sh)
			for i := uint32(1); saveCtx.Err() == nil; i++ {
				if err := store.SaveShardState(saveCtx, bson.Timestamp{T: 100 + i, I: 1}, nil); err != nil && saveCtx.Err() == nil {
					t.Errorf("save %s: %v", sh, err)
					return
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	started := time.Now().UTC().Truncate(time.Millisecond)
	steps := []string{workerapi.CutoverCatchingUp, workerapi.CutoverBlockingWrites, workerapi.CutoverDraining,
		workerapi.CutoverVerifying, workerapi.CutoverFinalizing, workerapi.CutoverFailed}
	for round := range 5 {
		for _, step := range steps {
			c := CutoverRecord{Step: step, StartedAt: started.Add(time.Duration(round) * time.Second), Message: step}
			if err := s.SetCutover(ctx, c); err != nil {
				t.Fatal(err)
			}
			// A save begun before the step was recorded ends after it.
			time.Sleep(20 * time.Millisecond)
			rec, err := s.Task(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Cutover == nil || rec.Cutover.Step != step || !rec.Cutover.StartedAt.Equal(c.StartedAt) {
				t.Fatalf("round %d: recorded %s, read %+v", round, step, rec.Cutover)
			}
		}
	}
	stop()
	wg.Wait()
	rec, err := s.Task(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverFailed || rec.AppliedTS.IsZero() {
		t.Errorf("after the saves: cut-over %+v, checkpoint %v: want Failed and the shards' checkpoint", rec.Cutover, rec.AppliedTS)
	}
}

// TestCutoverRecordLegacyAndDrop: a task record written before the
// cut-over had its own collection keeps its cut-over readable until a
// step is recorded; Drop removes the cut-over and the range leases with
// the task.
func TestCutoverRecordLegacyAndDrop(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	client := srv.MustClient(t)
	s := NewStore(client, "mongoferry", "cut-legacy")
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now().UTC().Truncate(time.Millisecond)
	old := CutoverRecord{Step: workerapi.CutoverDraining, StartedAt: started, SourceTS: bson.Timestamp{T: 7, I: 1}}
	if _, err := client.Database("mongoferry").Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "cut-legacy"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "cutover", Value: old}}}}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverDraining || rec.Cutover.SourceTS != old.SourceTS {
		t.Fatalf("legacy record read as %+v, want %+v", rec.Cutover, old)
	}
	if err := s.SetCutover(ctx, CutoverRecord{Step: workerapi.CutoverVerifying, StartedAt: started}); err != nil {
		t.Fatal(err)
	}
	if rec, err = s.Task(ctx); err != nil || rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverVerifying {
		t.Fatalf("after a step: %+v (%v), want Verifying", rec.Cutover, err)
	}
	// A range lease's document, as rangelease writes it (its own test
	// checks that Drop removes those it writes).
	if _, err := client.Database("mongoferry").Collection(RangeLeasesCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "cut-legacy/app.c/0/1"}, {Key: "task", Value: "cut-legacy"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Database("mongoferry").Collection(ShardCopyCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "cut-legacy/app.c/0"}, {Key: "task", Value: "cut-legacy"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{CutoversCollection, RangeLeasesCollection, ShardCopyCollection} {
		n, err := client.Database("mongoferry").Collection(c).CountDocuments(ctx, bson.D{{Key: "task", Value: "cut-legacy"}})
		if err != nil || n != 0 {
			t.Errorf("%d %s records after Drop (%v), want 0", n, c, err)
		}
	}
}

// TestShardCutoverSurvivesCheckpointSaves: on a real FerretDB target, a
// shard's part in the cut-over (caught up, its drain position, drained)
// recorded while that shard's subtask saves its checkpoint neither undoes
// a save nor is undone by one: each part reads back as recorded, and the
// last checkpoint saved reads back as saved. Before the shard's part had a
// document of its own, a save begun before the part was recorded wrote the
// record back whole without it, or the part's write put back an older
// checkpoint, and a drained shard seemed to have stopped below its drain
// position.
func TestShardCutoverSurvivesCheckpointSaves(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	s := NewStore(srv.MustClient(t), "mongoferry", "shard-cut-saves")
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetShardStart(ctx, "shard0", bson.Timestamp{T: 100, I: 1}); err != nil {
		t.Fatal(err)
	}
	saveCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var last bson.Timestamp
	wg.Go(func() {
		store := s.ForShard("shard0")
		for i := uint32(1); saveCtx.Err() == nil; i++ {
			ts := bson.Timestamp{T: 100 + i, I: 1}
			if err := store.SaveShardState(context.WithoutCancel(saveCtx), ts, nil); err != nil {
				t.Errorf("save: %v", err)
				return
			}
			last = ts
		}
	})
	defer func() { stop(); wg.Wait() }()
	started := time.Now().UTC().Truncate(time.Millisecond)
	for round := range 20 {
		c := ShardCutover{StartedAt: started, CaughtUp: true, DrainTS: bson.Timestamp{T: 1000 + uint32(round), I: 1}, Drained: round%2 == 1}
		if err := s.SetShardCutover(ctx, "shard0", c); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		rec, err := s.ShardRecord(ctx, "shard0")
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.CutoverOf(started); got != c {
			t.Fatalf("round %d: recorded %+v, read %+v", round, c, got)
		}
	}
	stop()
	wg.Wait()
	recs, err := s.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := recs["shard0"]
	if rec.AppliedTS != last || rec.Cutover == nil || rec.Cutover.DrainTS.T != 1019 {
		t.Errorf("after the saves: checkpoint %v (last saved %v), cut-over %+v", rec.AppliedTS, last, rec.Cutover)
	}
}
