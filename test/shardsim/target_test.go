package shardsim

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// TestTargetPresplit: for every key shape and version, the task's plan
// applied to the target model leaves chunks that cover the key space
// from MinKey to MaxKey with no gap, on the target's shards; a table
// with a gap is caught.
func TestTargetPresplit(t *testing.T) {
	want := map[string]int{`{sk: 1}`: 6, `{sk: "hashed"}`: 6, `{sk: 1, _id: 1}`: 1, `{_id: 1}`: 1}
	for _, major := range []int{5, 6, 7, 8} {
		for _, key := range TargetShapes {
			tgt := &Target{Major: major, Key: key, Shards: 3}
			m := Generate(3, "app.users", simSteps).Model
			if errs := tgt.Prepare(m); len(errs) > 0 {
				t.Errorf("%d.0 %s: %s", major, key, strings.Join(errs, "; "))
			}
			if got := tgt.Stats().Chunks; got != want[key.String()] {
				t.Errorf("%d.0 %s: %d chunks, want %d", major, key, got, want[key.String()])
			}
		}
	}
	tgt := &Target{Key: targetsharding.Key{{Name: "sk"}}, Shards: 2}
	k := func(v any) bson.Raw { return keyDoc(tgt.Key, v) }
	tgt.chunks = []targetChunk{{min: k(bson.MinKey{}), max: k(int64(10)), shard: "t0"}, {min: k(int64(20)), max: k(bson.MaxKey{}), shard: "t1"}}
	if errs := tgt.covered(); len(errs) != 1 || !strings.Contains(errs[0], "gap") {
		t.Errorf("a table with a gap: %q", errs)
	}
}

// TestTargetRefusesUnkeyedWrites: with writes sent as a replica set
// target takes them (no shard keys), the target model refuses the upserts
// of the shards' inserts up to 7.0, as mongos does, and the run fails;
// from 7.1 mongos runs them in two phases and takes them. The target's
// key {sk, v} holds a field the source's document keys ({sk, _id}) do
// not.
func TestTargetRefusesUnkeyedWrites(t *testing.T) {
	for _, c := range []struct {
		major   int
		refused bool
	}{{7, true}, {8, false}} {
		sc := Generate(2, "app.users", simSteps)
		tgt := &Target{Major: c.major, Key: targetsharding.Key{{Name: "sk"}, {Name: "v"}}, Shards: 3}
		res, err := Run(context.Background(), sc, Config{Seed: 2, Sharded: tgt, Unkeyed: true})
		msg := strings.Join(res.Violations, "\n")
		if err != nil {
			msg += "\n" + err.Error()
		}
		refused := strings.Contains(msg, "Failed to target upsert by query")
		if refused != c.refused || tgt.Stats().Refused > 0 != c.refused {
			t.Errorf("%d.0: refused %v (%d), want %v:\n%s", c.major, refused, tgt.Stats().Refused, c.refused, msg)
		}
	}
}
