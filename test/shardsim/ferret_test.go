package shardsim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// ferretSeeds is the number of schedules run end to end onto FerretDB.
const ferretSeeds = 20

// TestSimOnFerretDB runs seeded schedules end to end: the subtasks' writes
// go to a real FerretDB target (one database per schedule) as well as to
// the recording sink, and the target's documents must equal the model's.
// FerretDB applies a few hundred single-document writes per second, so the
// schedules are short. SHARDSIM_SEED=<n> runs one alone.
func TestSimOnFerretDB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	first, n := seedsFromEnv(t, ferretSeeds)
	if n > ferretSeeds && testing.Verbose() {
		t.Logf("%d schedules onto FerretDB", n)
	}
	client := testserver.Start(t).MustClient(t)
	ctx := context.Background()
	started := time.Now()
	for seed := first; seed < first+uint64(n); seed++ {
		db := fmt.Sprintf("sim%d", seed)
		sc := Generate(seed, db+".users", simSteps)
		res, err := Run(ctx, sc, Config{Seed: seed, Kills: 2, Target: client, Timeout: 90 * time.Second})
		if err != nil {
			res.Violations = append(res.Violations, err.Error())
		}
		if err == nil && res.Stopped == "" {
			got, rerr := targetDocs(ctx, client.Database(db).Collection("users"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			res.Violations = append(res.Violations, CompareDocs(sc.Model.Docs, got)...)
		}
		for _, v := range res.Violations {
			t.Errorf("seed %d (replay alone: cd test && SHARDSIM_SEED=%d go test ./shardsim -run TestSimOnFerretDB -v): %s", seed, seed, v)
		}
		_ = client.Database(db).Drop(ctx)
	}
	t.Logf("%d schedules onto FerretDB in %s", n, time.Since(started).Round(time.Millisecond))
}

// targetDocs reads a target collection's documents.
func targetDocs(ctx context.Context, coll *mongo.Collection) (map[int64]Doc, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cur.Close(ctx) }()
	out := map[int64]Doc{}
	for cur.Next(ctx) {
		d := decode(cur.Current)
		if _, dup := out[d.ID]; dup {
			return nil, fmt.Errorf("two documents with _id %d on the target", d.ID)
		}
		out[d.ID] = d
	}
	return out, cur.Err()
}
