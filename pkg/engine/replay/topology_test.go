package replay

import (
	"errors"
	"log/slog"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestCheckTopology: the no-ops sharding operations log on a shard
// (s/resharding, s/shard_key_util.cpp, s/move_primary, s/shardsvr_*:
// o2's first field names the operation) stop a shard's subtask when they
// move a selected collection's data outside chunk migrations, naming the
// operation and the namespace; a shardCollection is followed; nothing
// stops a replica set's replay or a namespace the task does not select.
func TestCheckTopology(t *testing.T) {
	noop := func(o2 bson.D) oplog.Entry {
		raw, err := bson.Marshal(bson.D{{Key: "ts", Value: bson.Timestamp{T: 9, I: 1}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "n"}, {Key: "ns", Value: "shop.orders"},
			{Key: "o", Value: bson.D{{Key: "msg", Value: bson.D{{Key: o2[0].Key, Value: o2[0].Value}}}}}, {Key: "o2", Value: o2}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := oplog.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	tests := []struct {
		name  string
		shard bool
		o2    bson.D
		stop  bool
	}{
		{"reshardCollection", true, bson.D{{Key: "reshardCollection", Value: "shop.orders"}, {Key: "shardKey", Value: bson.D{{Key: "sku", Value: 1}}}}, true},
		{"reshardBegin (also unshardCollection, moveCollection)", true, bson.D{{Key: "reshardBegin", Value: "shop.orders"}, {Key: "reshardingUUID", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}}, true},
		{"refineCollectionShardKey is followed: no document moves", true, bson.D{{Key: "refineCollectionShardKey", Value: "shop.orders"}, {Key: "shardKey", Value: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}}}, false},
		{"movePrimary", true, bson.D{{Key: "movePrimary", Value: "shop"}, {Key: "from", Value: "rs0"}, {Key: "to", Value: "rs1"}}, true},
		{"shardCollection is followed", true, bson.D{{Key: "shardCollection", Value: "shop.orders"}, {Key: "shardKey", Value: bson.D{{Key: "_id", Value: "hashed"}}}}, false},
		{"a namespace the task does not select", true, bson.D{{Key: "reshardCollection", Value: "other.c"}}, false},
		{"movePrimary of a database the task excludes", true, bson.D{{Key: "movePrimary", Value: "archive"}, {Key: "from", Value: "rs0"}, {Key: "to", Value: "rs1"}}, false},
		{"on a replica set", false, bson.D{{Key: "reshardCollection", Value: "shop.orders"}}, false},
		{"a periodic no-op", true, bson.D{{Key: "msg", Value: "periodic noop"}}, false},
	}
	rename := func(from, to string) oplog.Entry {
		raw, err := bson.Marshal(bson.D{{Key: "ts", Value: bson.Timestamp{T: 9, I: 2}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"},
			{Key: "o", Value: bson.D{{Key: "renameCollection", Value: from}, {Key: "to", Value: to}, {Key: "stayTemp", Value: false}, {Key: "dropTarget", Value: true}}}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := oplog.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	m, err := catalog.NewMapper(config.Namespaces{Include: []string{`shop\..*`, `archive\..*`}, Exclude: []string{`archive\..*`}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name  string
		shard bool
		e     oplog.Entry
		stop  bool
	}
	rows := make([]row, 0, len(tests)+3)
	for _, tt := range tests {
		rows = append(rows, row{tt.name, tt.shard, noop(tt.o2), tt.stop})
	}
	// A recipient that was no donor logs no reshardBegin; its commit
	// renames the temporary collection over the original.
	rows = append(rows,
		row{"a resharding's commit on a recipient", true, rename("shop.system.resharding.6f1c2a3b-0000-4000-8000-000000000001", "shop.orders"), true},
		row{"the same rename on a replica set", false, rename("shop.system.resharding.6f1c2a3b-0000-4000-8000-000000000001", "shop.orders"), false},
		row{"a user's rename on a shard", true, rename("shop.staging", "shop.orders"), false})
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			r := &Replayer{o: Options{Mapper: m, ShardMember: tt.shard, Shard: "rs1"}, log: slog.New(slog.DiscardHandler)}
			err := r.checkTopology(tt.e)
			if errors.Is(err, ErrTopologyChange) != tt.stop {
				t.Fatalf("checkTopology = %v, stop want %v", err, tt.stop)
			}
			if tt.stop {
				t.Log(err)
			}
		})
	}
}
