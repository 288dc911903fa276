package replay

import (
	"context"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// TestSourceDocWritesCarryTheShardKey: what a recheck or a settle writes
// (writeSourceDoc) onto a target sharded on sk. The delete of the
// target's document goes with the shard key the target has; where the
// target holds no document with the _id, no delete goes at all: by {_id}
// alone it would carry no shard key (test/shardsim's target model
// refused one, seed 827 in make test and 15911, 20906 in make sim-long),
// and the only document it could meet is one another subtask wrote since
// the target was read, which the recheck's next read of the source
// covers.
func TestSourceDocWritesCarryTheShardKey(t *testing.T) {
	current := mustRaw(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "sk", Value: int32(5)}, {Key: "v", Value: int32(1)}})
	source := mustRaw(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "sk", Value: int32(6)}, {Key: "v", Value: int32(2)}})
	for _, c := range []struct {
		name   string
		target []bson.Raw // what the target holds
		doc    bson.Raw   // what the source holds; nil: none
		key    targetsharding.Key
		want   []string
	}{
		{"held, source has none", []bson.Raw{current}, nil, targetsharding.Key{{Name: "sk"}},
			[]string{`delete {"sk":5,"_id":7}`}},
		{"held, source has another", []bson.Raw{current}, source, targetsharding.Key{{Name: "sk"}},
			[]string{`delete {"sk":5,"_id":7}`, `replace upsert {"sk":6,"_id":7}`}},
		{"none held, source has none", nil, nil, targetsharding.Key{{Name: "sk"}}, nil},
		{"none held, source has one", nil, source, targetsharding.Key{{Name: "sk"}},
			[]string{`replace upsert {"sk":6,"_id":7}`}},
		{"sharded on _id: the delete by _id as before", nil, nil, targetsharding.Key{{Name: "_id"}},
			[]string{`delete {"_id":7}`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := config.Spec{}
			spec.SetDefaults()
			mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
			if err != nil {
				t.Fatal(err)
			}
			var sent []string
			apply := func(_ context.Context, _ catalog.Namespace, models []mongo.WriteModel) error {
				for _, m := range models {
					sent = append(sent, describe(m))
				}
				return nil
			}
			sk := &fakeShardKeys{key: c.key, docs: c.target}
			r := New(Options{Task: "t", Spec: &spec, Mapper: mapper, Apply: apply, ShardKeys: sk, TargetMajor: 6, ShardMember: true})
			ctx := context.Background()
			ns := catalog.ParseNamespace("shop.users")
			filter := mustRaw(t, bson.D{{Key: "_id", Value: int32(7)}})
			it := item{ns: ns, src: ns, key: filter}
			if it.tk, err = r.targetKeyOf(ctx, ns); err != nil {
				t.Fatal(err)
			}
			if err := r.writeSourceDoc(ctx, it, filter, targetsharding.Key{{Name: "sk"}}, c.doc); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sent, c.want) {
				t.Errorf("sent %q, want %q", sent, c.want)
			}
		})
	}
}
