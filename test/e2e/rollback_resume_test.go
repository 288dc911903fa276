package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestResumeAfterRollback runs a task until it has replayed writes, so
// that its checkpoint names the oplog entry it was saved at (ts and
// term), then makes the source's history at that position differ from
// the checkpoint's, as a failover's rollback leaves it: FerretDB keeps no
// replica set, so the checkpoint's term is changed instead of the
// source's (the source then holds an entry of another term at that ts,
// what a new primary's oplog shows where a rolled-back entry was). The
// next run must stop before writing anything, with ErrRolledBack naming
// the position and `ferry reset`; the target keeps its documents and its
// checkpoint.
func TestResumeAfterRollback(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "c", mixedIDDocs(50))
	task := newTask(t, "rollback", src, dst, func(t *config.Task) { t.Mode = config.ModeFullAndIncremental })
	opts := engineOpts()
	opts.UntilCaughtUp = true
	if _, err := runEngine(t, task, opts); err != nil {
		t.Fatalf("first run: %v", err)
	}
	for i := range 5 {
		if _, err := sc.Database("app").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "later" + string(rune('a'+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runEngine(t, task, opts); err != nil {
		t.Fatalf("second run: %v", err)
	}
	assertSameDocs(t, sc, "app.c", dc, "app.c")
	store := checkpoint.NewStore(dc, task.Checkpoint.Database, task.Name)
	rec, err := store.Task(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.AppliedEntry == nil || rec.AppliedEntry.TS.Compare(rec.AppliedTS) > 0 {
		t.Fatalf("checkpoint %v saved with entry %+v; want the entry at or below it", rec.AppliedTS, rec.AppliedEntry)
	}
	if err := source.CheckRollback(ctx, sc, *rec.AppliedEntry); err != nil {
		t.Fatalf("the source's own history fails the check: %v", err)
	}

	// The source's history changes under the checkpoint.
	rolled := *rec.AppliedEntry
	rolled.T += 5
	if _, err := dc.Database(task.Checkpoint.Database).Collection(checkpoint.TasksCollection).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: task.Name}}, bson.D{{Key: "$set", Value: bson.D{{Key: "appliedEntry", Value: rolled}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Database("app").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "after"}}); err != nil {
		t.Fatal(err)
	}
	_, runErr := runEngine(t, task, opts)
	err = runErr
	if !errors.Is(err, source.ErrRolledBack) || !errors.Is(err, source.ErrOplogWindowLost) {
		t.Fatalf("run over a rolled-back checkpoint: %v; want ErrRolledBack (exit code 3, as OplogWindowLost)", err)
	}
	for _, part := range []string{"ferry reset -f", "nothing was written", "rolled back"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %q", err, part)
		}
	}
	if n, err := dc.Database("app").Collection("c").CountDocuments(ctx, bson.D{{Key: "_id", Value: "after"}}); err != nil || n != 0 {
		t.Errorf("the refused run wrote to the target (%d, %v)", n, err)
	}
	after, err := store.Task(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.AppliedTS != rec.AppliedTS {
		t.Errorf("the refused run moved the checkpoint from %v to %v", rec.AppliedTS, after.AppliedTS)
	}
	t.Logf("refused: %v", runErr)
}
