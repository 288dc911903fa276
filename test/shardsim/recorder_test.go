package shardsim

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
)

// TestRecorderReplayOfRefusedWrite: X is inserted on s0, moved to s1 by
// a shard-key change (delete on s0, insert on s1, one transaction) and
// deleted on s1; the application then inserts X again on s0 and deletes
// it. s0's subtask, ahead, applies all but that last delete; s1's first
// instance meets the new X with the change's insert (a duplicate key on
// _id), waits, meets it again and steps the insert over (the source
// holds no X), then applies its delete, which matches nothing; s0's
// subtask deletes X. s1's subtask is killed, its checkpoint still below
// the change, and its next instance applies the insert and the delete
// again (seed 17753 of TestSim). The insert lands after the first
// instance's delete, as any write applied again after a restart lands
// after the later writes applied before it: the order check takes it
// as such only if the instance that applied the later write met this
// one before it, and the new instance started below it.
func TestRecorderReplayOfRefusedWrite(t *testing.T) {
	m := NewModel(1, "app.users", 2, false)
	s0, s1 := m.Owner(0), m.Owner(1)
	if s0 == s1 {
		t.Fatalf("chunks 0 and 1 are both on %s", s0.Name)
	}
	x := m.Insert(5)
	if !m.ChangeKey(x.ID, 15, nil) {
		t.Fatal("the shard-key change stays on one shard")
	}
	m.Delete(x.ID)
	m.InsertID(x.ID, 7)
	m.Delete(x.ID)
	m.Finish()
	byShardSeq := map[string]map[int]Write{}
	for _, w := range m.Writes {
		if w.ID != x.ID {
			continue
		}
		if byShardSeq[w.Shard] == nil {
			byShardSeq[w.Shard] = map[int]Write{}
		}
		byShardSeq[w.Shard][w.Seq] = w
	}
	ins1, del2, ins4, del5 := byShardSeq[s0.Name][1], byShardSeq[s0.Name][2], byShardSeq[s0.Name][4], byShardSeq[s0.Name][5]
	ins2, del3 := byShardSeq[s1.Name][2], byShardSeq[s1.Name][3]
	if ins1.Kind != 'i' || del2.Kind != 'd' || ins2.Kind != 'i' || del3.Kind != 'd' || ins4.Kind != 'i' || del5.Kind != 'd' {
		t.Fatalf("the model's writes of _id %d are not as planned: %+v", x.ID, byShardSeq)
	}
	old, moved, again := Doc{ID: x.ID, SK: 5, V: 1}, Doc{ID: x.ID, SK: 15, V: 2}, Doc{ID: x.ID, SK: 7, V: 4}
	upsert := func(d Doc) mongo.WriteModel {
		return mongo.NewReplaceOneModel().SetFilter(mustRaw(t, d.key())).SetReplacement(mustRaw(t, d.raw())).SetUpsert(true)
	}
	remove := func(d Doc) mongo.WriteModel { return mongo.NewDeleteOneModel().SetFilter(mustRaw(t, d.key())) }
	type step struct {
		shard string
		inst  int
		model mongo.WriteModel
		w     Write
	}
	first := []step{{s0.Name, 1, upsert(old), ins1}, {s0.Name, 1, remove(old), del2}, {s0.Name, 1, upsert(again), ins4}}
	cases := []struct {
		name string
		// steps of s1's first instance (2), before s0's subtask deletes X
		// and s1's instance 3 starts from restart and applies the
		// change's insert and the delete again.
		steps   []step
		restart bson.Timestamp
		want    string // in the errors; "" for none
	}{
		{
			name: "stepped over before the delete",
			steps: []step{
				{s1.Name, 2, upsert(moved), ins2}, {s1.Name, 2, upsert(moved), ins2}, // refused, waits, refused
				{s1.Name, 2, remove(moved), del3},
			},
			restart: board.Prev(ins2.TS),
		},
		{
			name: "refused after the delete",
			steps: []step{
				{s1.Name, 2, upsert(moved), ins2},
				{s1.Name, 2, remove(moved), del3},
				{s1.Name, 2, upsert(moved), ins2},
			},
			restart: board.Prev(ins2.TS),
			want:    "was applied after its #3",
		},
		{
			name: "never met before the delete",
			steps: []step{
				{s1.Name, 2, remove(moved), del3},
			},
			restart: board.Prev(ins2.TS),
			want:    "was applied after its #3",
		},
		{
			name: "restarted above the insert",
			steps: []step{
				{s1.Name, 2, upsert(moved), ins2},
				{s1.Name, 2, remove(moved), del3},
			},
			restart: ins2.TS,
			want:    "was applied after its #3",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			rec := NewRecorder(m)
			rec.Started(s0.Name, 1, bson.Timestamp{})
			rec.Started(s1.Name, 2, bson.Timestamp{})
			steps := append(append(append([]step{}, first...), c.steps...),
				step{s0.Name, 1, remove(again), del5}, step{s1.Name, 3, upsert(moved), ins2}, step{s1.Name, 3, remove(moved), del3})
			for i, s := range steps {
				if i == len(steps)-2 {
					rec.Started(s1.Name, 3, c.restart)
				}
				err := rec.Apply(ctx, s.shard, s.inst, []mongo.WriteModel{s.model}, []bson.Timestamp{s.w.TS})
				if refused := err != nil; refused != (s.shard == s1.Name && s.inst == 2 && s.w == ins2) {
					t.Fatalf("step %d (%s instance %d, #%d): %v", i, s.shard, s.inst, s.w.Seq, err)
				}
			}
			errs := strings.Join(rec.Check(), "\n")
			if c.want == "" && errs != "" || !strings.Contains(errs, c.want) {
				t.Errorf("errors:\n%s\nwant %q", errs, c.want)
			}
		})
	}
}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
