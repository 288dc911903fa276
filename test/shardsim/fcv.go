package shardsim

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sharding"
)

// insertKey returns the o2 of an insert of d: its document key from FCV
// 5.3 (OpObserverImpl::onInserts logs the shard key and _id from then; the
// server's jstest of write entries' document keys is tagged
// requires_fcv_53), none before, in applyOps operations too. The first
// model (no Version) keeps it.
func (m *Model) insertKey(d Doc) bson.D {
	fcv := m.B.FCV
	if fcv == 0 {
		fcv = m.B.Version
	}
	if fcv != 0 && fcv < 53 {
		m.Fired["NoInsertKey"]++
		return nil
	}
	return d.key()
}

// decodeD reads a document the model built.
func decodeD(d bson.D) Doc {
	raw, err := bson.Marshal(d)
	if err != nil {
		panic(err)
	}
	return decode(raw)
}

// sourceKeys is replay.ShardKeys for the source: the model's collection
// is sharded on {sk: 1}, as its config.collections says, through every
// shardCollection and refineCollectionShardKey it logs (they keep the
// key); other namespaces are not sharded.
type sourceKeys struct{ ns string }

func (k sourceKeys) Key(_ context.Context, ns catalog.Namespace) (sharding.Key, error) {
	if ns.String() != k.ns {
		return nil, nil
	}
	return sharding.Key{{Name: "sk"}}, nil
}

func (sourceKeys) Current(context.Context, catalog.Namespace, sharding.Key, []bson.RawValue) ([]bson.Raw, error) {
	return nil, nil
}
