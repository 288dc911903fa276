package replay

import (
	"errors"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// ErrTopologyChange is returned when a shard's oplog shows an operation
// that moves a collection's data between shards outside chunk migrations,
// which per-shard replay cannot follow.
var ErrTopologyChange = errors.New("sharding topology change")

// Sharding operations log a no-op on the shards they touch, whose o2 names
// the operation by its first field (the change-stream events of the same
// names come from these entries): {reshardCollection: "db.coll", ...},
// {refineCollectionShardKey: "db.coll", ...}, {movePrimary: "db", ...},
// {shardCollection: "db.coll", ...}. unshardCollection and moveCollection
// (8.0) run as a resharding and log reshardBegin/reshardCollection.
var topologyStops = map[string]string{
	"reshardBegin":             "a resharding (reshardCollection, unshardCollection or moveCollection) copies the collection to new shards outside chunk migrations",
	"reshardCollection":        "the collection was resharded: its documents were copied to new shards outside chunk migrations",
	"refineCollectionShardKey": "the collection's shard key was refined: its document keys change shape",
	"movePrimary":              "the database's unsharded collections moved to another shard outside chunk migrations",
}

// checkTopology stops a shard's subtask at a sharding operation it cannot
// follow on a selected namespace, naming it and what to do; a
// shardCollection is only logged (the collection's later moves are chunk
// migrations, which the subtasks follow).
func (r *Replayer) checkTopology(e oplog.Entry) error {
	if !r.o.ShardMember || e.Kind() != oplog.Noop || len(e.O2()) == 0 {
		return nil
	}
	first, err := e.O2().IndexErr(0)
	if err != nil {
		return nil
	}
	name, ok := first.Value().StringValueOK()
	if !ok {
		return nil
	}
	ns := catalog.ParseNamespace(name)
	selected := r.o.Mapper.SelectedDB(ns.DB)
	if ns.Coll != "" {
		selected = r.o.Mapper.Selected(ns)
	}
	if !selected {
		return nil
	}
	op := first.Key()
	if op == "shardCollection" {
		r.log.Info("a collection of the task was sharded; its chunk migrations are followed from now on", "shard", r.o.Shard, "ns", name)
		return nil
	}
	why, stop := topologyStops[op]
	if !stop {
		return nil
	}
	ts := e.TS()
	exclude := regexpQuote(name)
	if ns.Coll == "" {
		exclude += `\..*`
	}
	return fmt.Errorf("replay: shard %s, ts %d,%d: %w: %s on %s: %s, which per-shard replay cannot follow. "+
		"Let it finish, then resync the task (delete its checkpoint database and run it again), or leave it out (namespaces.exclude: ['%s'])",
		r.o.Shard, ts.T, ts.I, ErrTopologyChange, op, name, why, exclude)
}
