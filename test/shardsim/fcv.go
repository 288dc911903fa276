package shardsim

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
)

// insertKey returns the o2 of an insert of d: its document key on a
// binary of 5.3 or later, none before, in applyOps operations too. The
// gate is the binary, not the FCV: OpObserverImpl::onInserts
// (db/op_observer/op_observer_impl.cpp, 6.0 to 8.0) sets o2 to
// getDocumentKey(...).getShardKeyAndId() with no FCV check, and
// MutableOplogEntry::makeInsertOperation (db/repl/oplog_entry.cpp) takes
// the key for transactions and batched writes; the 5.0 source logs
// neither. The server's jstest of write entries' document keys is tagged
// requires_fcv_53, which keeps it out of suites with older binaries; a
// 6.0 binary at FCV 5.0 logs o2. The first model (no Version) keeps it.
func (m *Model) insertKey(d Doc) bson.D {
	if v := m.B.Version; v != 0 && v < 53 {
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

func (k sourceKeys) Key(_ context.Context, ns catalog.Namespace) (targetsharding.Key, error) {
	if ns.String() != k.ns {
		return nil, nil
	}
	return targetsharding.Key{{Name: "sk"}}, nil
}

func (sourceKeys) Current(context.Context, catalog.Namespace, targetsharding.Key, []bson.RawValue) ([]bson.Raw, error) {
	return nil, nil
}
