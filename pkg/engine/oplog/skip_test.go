package oplog

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

func TestSkip(t *testing.T) {
	id := bson.D{{Key: "_id", Value: 1}}
	ins := func(ns string) bson.D { return with(outer(1, "i", ns), "o", id) }
	cmd := func(ns string, o bson.D) bson.D { return with(outer(1, "c", ns), "o", o) }
	mapper, err := catalog.NewMapper(config.Namespaces{}, "ferrycp")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		entry  bson.D
		skip   bool
		reason string
	}{
		{"user insert", ins("shop.orders"), false, ""},
		{"fromMigrate insert", with(ins("shop.orders"), "fromMigrate", true), true, ReasonFromMigrate},
		{"fromMigrate delete", with(outer(1, "d", "shop.orders"), "o", id, "fromMigrate", true), true, ReasonFromMigrate},
		{"noop", with(outer(1, "n", ""), "o", bson.D{{Key: "msg", Value: "periodic noop"}}), true, ReasonNoop},
		{"admin", ins("admin.users"), true, ReasonInternal},
		{"local", ins("local.startup_log"), true, ReasonInternal},
		{"config", ins("config.transactions"), true, ReasonInternal},
		{"checkpoint database", ins("ferrycp.checkpoints"), true, ReasonInternal},
		{"system collection", ins("shop.system.profile"), true, ReasonInternal},
		{"view catalog (view DDL)", ins("shop.system.views"), false, ""},
		{"view catalog of an internal database", ins("admin.system.views"), true, ReasonInternal},
		{"time-series buckets", ins("shop.system.buckets.weather"), false, ""},
		{"create of time-series buckets", cmd("shop.$cmd", bson.D{{Key: "create", Value: "system.buckets.weather"}}), false, ""},
		{"convertToCapped clone insert on a replica set", with(ins("shop.tmpAb1cD.convertToCapped.orders"), "fromMigrate", true), false, ""},
		{"a collection named like a system one", ins("shop.systems"), false, ""},
		{"startIndexBuild", cmd("shop.$cmd", bson.D{{Key: "startIndexBuild", Value: "orders"}}), true, ReasonIndexBuild},
		{"abortIndexBuild", cmd("shop.$cmd", bson.D{{Key: "abortIndexBuild", Value: "orders"}}), true, ReasonIndexBuild},
		{"dbCheck", cmd("shop.$cmd", bson.D{{Key: "dbCheck", Value: "orders"}}), true, ReasonDBCheck},
		{"create", cmd("shop.$cmd", bson.D{{Key: "create", Value: "orders"}}), false, ""},
		{"create in config", cmd("config.$cmd", bson.D{{Key: "create", Value: "cache.x"}}), true, ReasonInternal},
		{"create system.profile", cmd("shop.$cmd", bson.D{{Key: "create", Value: "system.profile"}}), true, ReasonInternal},
		{"drop in checkpoint database", cmd("ferrycp.$cmd", bson.D{{Key: "drop", Value: "c"}}), true, ReasonInternal},
		{"dropDatabase of checkpoint database", cmd("ferrycp.$cmd", bson.D{{Key: "dropDatabase", Value: 1}}), true, ReasonInternal},
		{"dropDatabase", cmd("shop.$cmd", bson.D{{Key: "dropDatabase", Value: 1}}), false, ""},
		{"rename between internal names", cmd("admin.$cmd", bson.D{{Key: "renameCollection", Value: "config.a"}, {Key: "to", Value: "config.b"}}), true, ReasonInternal},
		{"rename out of an internal name", cmd("admin.$cmd", bson.D{{Key: "renameCollection", Value: "shop.system.tmp"}, {Key: "to", Value: "shop.orders"}}), false, ""},
		{"rename between user names (ns admin.$cmd)", cmd("admin.$cmd", bson.D{{Key: "renameCollection", Value: "shop.a"}, {Key: "to", Value: "shop.b"}}), false, ""},
		{"applyOps on admin.$cmd", cmd("admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{}}}), false, ""},
		{"fromMigrate applyOps", with(cmd("admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{}}}), "fromMigrate", true), true, ReasonFromMigrate},
		{"commitTransaction", cmd("admin.$cmd", bson.D{{Key: "commitTransaction", Value: 1}}), false, ""},
		{"unknown command in admin", cmd("admin.$cmd", bson.D{{Key: "setFeatureCompatibilityVersion", Value: "7.0"}}), true, ReasonInternal},
		{"unknown command in a user database", cmd("shop.$cmd", bson.D{{Key: "frobnicate", Value: 1}}), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.entry)
			for name, fn := range map[string]func(catalog.Namespace) bool{
				"Mapper.IsInternal":  mapper.IsInternal,
				"InternalNamespaces": InternalNamespaces("ferrycp"),
			} {
				f := &Filter{IsInternal: fn, ShardMember: true}
				skip, reason := f.Skip(e)
				if skip != tt.skip || reason != tt.reason {
					t.Errorf("%s: Skip = %v %q, want %v %q", name, skip, reason, tt.skip, tt.reason)
				}
			}
		})
	}

	// nil isInternal: the server's databases and system.* only.
	if skip, _ := (&Filter{}).Skip(mustParse(t, ins("ferrycp.x"))); skip {
		t.Error("nil isInternal skipped a database it does not know")
	}
	if skip, _ := (&Filter{}).Skip(mustParse(t, ins("local.x"))); !skip {
		t.Error("nil isInternal did not skip local")
	}
}

// TestSkipFromMigrate: fromMigrate marks a chunk migration only on a
// shard; convertToCapped and cloneCollectionAsCapped clone with
// fromMigrate inserts on a replica set too (capped_utils.cpp), and a
// capped collection is never sharded.
func TestSkipFromMigrate(t *testing.T) {
	fm := func(op, ns string) bson.D {
		return with(outer(1, op, ns), "o", bson.D{{Key: "_id", Value: 1}}, "fromMigrate", true)
	}
	createCapped := with(outer(1, "c", "shop.$cmd"), "o", bson.D{{Key: "create", Value: "logs"}, {Key: "capped", Value: true}, {Key: "size", Value: 4096}})
	tests := []struct {
		name    string
		shard   bool
		before  []bson.D
		entry   bson.D
		skipped bool
	}{
		{"replica set: clone insert", false, nil, fm("i", "shop.logs"), false},
		{"replica set: delete", false, nil, fm("d", "shop.orders"), false},
		{"shard: chunk copy", true, nil, fm("i", "shop.orders"), true},
		{"shard: range deletion", true, nil, fm("d", "shop.orders"), true},
		{"shard: convertToCapped clone", true, nil, fm("i", "shop.tmpX1y2Z.convertToCapped.orders"), false},
		{"shard: cloneCollectionAsCapped into a capped collection", true, []bson.D{createCapped}, fm("i", "shop.logs"), false},
		{"shard: after the capped collection is dropped", true, []bson.D{createCapped, with(outer(1, "c", "shop.$cmd"), "o", bson.D{{Key: "drop", Value: "logs"}})}, fm("i", "shop.logs"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Filter{ShardMember: tt.shard}
			for _, d := range tt.before {
				f.Skip(mustParse(t, d))
			}
			if skip, _ := f.Skip(mustParse(t, tt.entry)); skip != tt.skipped {
				t.Errorf("skipped = %v, want %v", skip, tt.skipped)
			}
		})
	}
}
