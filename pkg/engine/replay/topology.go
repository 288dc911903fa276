package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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
	"reshardBegin":      "a resharding (reshardCollection, unshardCollection or moveCollection) copies the collection to new shards outside chunk migrations",
	"reshardCollection": "the collection was resharded: its documents were copied to new shards outside chunk migrations",
	"movePrimary":       "the database's unsharded collections moved to another shard outside chunk migrations",
}

// topologyFollowed are the sharding operations a shard's subtask follows
// and only logs: after shardCollection a collection's documents move by
// chunk migrations, which the subtasks follow; refineCollectionShardKey
// moves no document (it adds suffix fields to the key, and later entries'
// document keys carry them, which the delete filters use as they come).
var topologyFollowed = map[string]string{
	"shardCollection":          "a collection of the task was sharded; its chunk migrations are followed from now on",
	"refineCollectionShardKey": "a collection of the task had its shard key refined; no document moved, and its later document keys are followed as they come",
}

// checkTopology stops a shard's subtask at a sharding operation it cannot
// follow on a selected namespace, naming it and what to do; the
// operations of topologyFollowed are only logged.
func (r *Replayer) checkTopology(e oplog.Entry) error {
	if r.o.ShardMember && e.Command() == oplog.CmdRenameCollection {
		return r.checkReshardCommit(e)
	}
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
	op := first.Key()
	why, stop := topologyStops[op]
	followed, follow := topologyFollowed[op]
	if !stop && !follow {
		return nil
	}
	ns := catalog.ParseNamespace(name)
	r.forgetSourceKey(ns)
	if ns.Coll == "" && !r.dbSelected(ns.DB) || ns.Coll != "" && !r.o.Mapper.Selected(ns) {
		return nil
	}
	if follow {
		r.log.Info(followed, "shard", r.o.Shard, "ns", name, "op", op)
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

// dbSelected reports whether the task may select a collection of db (a
// movePrimary names only the database): not when the database is internal
// or excluded as a whole (namespaces.exclude: ['db\..*']), nor when none
// of its collections on the source is selected; otherwise, and when the
// source cannot be asked, it may.
func (r *Replayer) dbSelected(db string) bool {
	m := r.o.Mapper
	if !m.SelectedDB(db) || m.ExcludesDB(db) {
		return false
	}
	if r.o.Source == nil {
		return true
	}
	// Rare (a movePrimary of a database): a bounded call of its own.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names, err := r.o.Source.Database(db).ListCollectionNames(ctx, bson.D{})
	if err != nil {
		r.log.Warn("cannot list the collections of a database whose primary shard moved; taking it as selected", "shard", r.o.Shard, "db", db, "error", err)
		return true
	}
	return slices.ContainsFunc(names, func(c string) bool { return m.Selected(catalog.Namespace{DB: db, Coll: c}) })
}

// reshardTemp is the prefix of the collection a resharding recipient
// builds (<db>.system.resharding.<uuid>) and renames over the original
// when the resharding commits.
const reshardTemp = "system.resharding."

// checkReshardCommit stops a shard's subtask at a resharding's commit on a
// recipient that logged no reshardBegin of its own (a shard that was not
// a donor): its rename of the temporary collection over a selected one
// would otherwise look like a rename into the task and copy the
// collection again while other subtasks still apply older writes.
func (r *Replayer) checkReshardCommit(e oplog.Entry) error {
	d, err := e.DDL()
	if err != nil || !strings.HasPrefix(d.NS.Coll, reshardTemp) || !r.o.Mapper.Selected(d.To) {
		return nil
	}
	ts := e.TS()
	return fmt.Errorf("replay: shard %s, ts %d,%d: %w: reshardCollection on %s: the resharding committed on this shard (renamed %s over it), "+
		"which per-shard replay cannot follow. Resync the task (delete its checkpoint database and run it again), or leave it out (namespaces.exclude: ['%s'])",
		r.o.Shard, ts.T, ts.I, ErrTopologyChange, d.To, d.NS, regexpQuote(d.To.String()))
}
