package oplog

import (
	"slices"
	"strings"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// The reasons Skip gives, short and fixed so they can label a metric.
const (
	// ReasonFromMigrate: a chunk migration's write (fromMigrate: true): the
	// donor's range deletion or the recipient's copy, never a user's write.
	ReasonFromMigrate = "fromMigrate"
	// ReasonNoop: an 'n' entry. It writes nothing, but its ts still counts:
	// the reader advances its watermark past it (that is how an idle shard
	// lets the others' entries be released).
	ReasonNoop = "noop"
	// ReasonInternal: the namespace belongs to the server or to MongoFerry.
	ReasonInternal = "internalNamespace"
	// ReasonIndexBuild: startIndexBuild and abortIndexBuild; the indexes
	// are built from the commitIndexBuild entry.
	ReasonIndexBuild = "indexBuildStartOrAbort"
	// ReasonDBCheck: a dbCheck entry, which changes no data.
	ReasonDBCheck = "dbCheck"
)

// Filter decides which entries the replayer applies nothing for. The
// zero value judges a replica set's oplog with InternalNamespaces("").
//
// A Filter remembers the collections it saw created capped (Skip must see
// every entry in oplog order, before Assembler.Add and again for each
// operation of the units it emits), so it belongs to one reader.
type Filter struct {
	// IsInternal says which namespaces belong to the server or to
	// MongoFerry: pass catalog.Mapper.IsInternal or InternalNamespaces;
	// nil means InternalNamespaces("").
	IsInternal func(catalog.Namespace) bool
	// ShardMember is set when the oplog is a shard's: fromMigrate then
	// marks a chunk migration's copy or range deletion, never a user's
	// write, and is skipped. On a replica set that is not a shard,
	// fromMigrate only marks the copy of convertToCapped and
	// cloneCollectionAsCapped, which must be applied. A capped collection
	// is never sharded, so on a shard too fromMigrate writes into a
	// collection created capped (or named like convertToCapped's clone)
	// are applied.
	ShardMember bool

	capped map[string]struct{}
}

// Skip reports whether the replayer applies nothing for e, and why:
//
//   - chunk migrations' entries (ReasonFromMigrate; see ShardMember);
//   - no-ops (ReasonNoop): skipped, yet their ts advances the watermark;
//   - startIndexBuild, abortIndexBuild, dbCheck (ReasonIndexBuild,
//     ReasonDBCheck);
//   - entries on internal namespaces (ReasonInternal). A command is
//     judged by the namespace it acts on (a renameCollection is skipped
//     when both names are internal), not by its "db.$cmd"; a write on a
//     time-series collection's buckets by the time-series collection;
//     a write on system.views by its database (the view DDL it stands for
//     is judged when applied).
//
// Transaction entries (applyOps, commitTransaction, abortTransaction) are
// only skipped for fromMigrate: their ns is admin.$cmd, and their
// operations are judged one by one after the Assembler has unwrapped them.
func (f *Filter) Skip(e Entry) (skip bool, reason string) {
	isInternal := f.IsInternal
	if isInternal == nil {
		isInternal = InternalNamespaces("")
	}
	switch {
	case e.FromMigrate() && f.migration(e):
		return true, ReasonFromMigrate
	case e.op == OpNoop:
		return true, ReasonNoop
	case e.op != OpCommand:
		ns := e.Namespace()
		if IsViews(ns) {
			ns = catalog.Namespace{DB: ns.DB}
		}
		if isInternal(userNamespace(ns)) {
			return true, ReasonInternal
		}
		return false, ""
	}
	switch {
	case e.cmd.IsTxn():
		return false, ""
	case e.cmd == CmdDBCheck:
		return true, ReasonDBCheck
	case e.cmd.Skipped():
		return true, ReasonIndexBuild
	}
	db, _ := strings.CutSuffix(e.ns, ".$cmd")
	if !e.cmd.IsDDL() {
		// An unknown command: judged by its database, so that server
		// housekeeping in admin, config or local never stops a replay.
		if isInternal(catalog.Namespace{DB: db}) {
			return true, ReasonInternal
		}
		return false, ""
	}
	d, err := e.ddl()
	if err != nil {
		// Malformed: let Translate report it, unless the database alone
		// says it is internal.
		if isInternal(catalog.Namespace{DB: db}) {
			return true, ReasonInternal
		}
		return false, ""
	}
	f.observe(d)
	internal := isInternal(userNamespace(d.NS))
	if d.Class == CmdRenameCollection {
		internal = internal && isInternal(userNamespace(d.To))
	}
	if internal {
		return true, ReasonInternal
	}
	return false, ""
}

// migration reports whether a fromMigrate entry is a chunk migration's.
func (f *Filter) migration(e Entry) bool {
	if !f.ShardMember {
		return false
	}
	if e.op == OpInsert || e.op == OpDelete || e.op == OpUpdate {
		ns := e.Namespace()
		if _, ok := CappedCloneOf(ns); ok {
			return false
		}
		if _, ok := f.capped[ns.String()]; ok {
			return false
		}
	}
	return true
}

// observe remembers the collections created capped, and forgets dropped
// or renamed ones.
func (f *Filter) observe(d DDL) {
	switch d.Class {
	case CmdCreate:
		if v, found, err := lookup(d.Command, "capped"); err == nil && found {
			if b, ok := v.BooleanOK(); ok && b {
				if f.capped == nil {
					f.capped = map[string]struct{}{}
				}
				f.capped[d.NS.String()] = struct{}{}
			}
		}
	case CmdDrop, CmdRenameCollection:
		delete(f.capped, d.NS.String())
	}
}

// InternalNamespaces returns the default isInternal for Skip: the admin,
// local and config databases, the checkpoint database, and system.*
// collections, the same rule as catalog.Mapper.IsInternal.
func InternalNamespaces(checkpointDB string) func(catalog.Namespace) bool {
	dbs := slices.Clone(config.InternalDatabases)
	if checkpointDB != "" {
		dbs = append(dbs, checkpointDB)
	}
	return func(n catalog.Namespace) bool {
		return slices.Contains(dbs, n.DB) || strings.HasPrefix(n.Coll, "system.")
	}
}
