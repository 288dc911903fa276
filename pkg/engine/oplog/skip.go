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

// Skip reports whether the replayer applies nothing for e, and why:
//
//   - fromMigrate entries (ReasonFromMigrate);
//   - no-ops (ReasonNoop): skipped, yet their ts advances the watermark;
//   - startIndexBuild, abortIndexBuild, dbCheck (ReasonIndexBuild,
//     ReasonDBCheck);
//   - entries on internal namespaces (ReasonInternal), as isInternal says;
//     pass catalog.Mapper.IsInternal, or InternalNamespaces(checkpointDB);
//     nil means InternalNamespaces(""). A command is judged by the
//     namespace it acts on (a renameCollection is skipped when both names
//     are internal), not by its "db.$cmd".
//
// Transaction entries (applyOps, commitTransaction, abortTransaction) are
// only skipped for fromMigrate: their ns is admin.$cmd, and their
// operations are judged one by one after the Assembler has unwrapped them.
// So call Skip on every entry before Assembler.Add, and again on each
// operation of the units it emits.
func Skip(e Entry, isInternal func(catalog.Namespace) bool) (skip bool, reason string) {
	if isInternal == nil {
		isInternal = InternalNamespaces("")
	}
	switch {
	case e.FromMigrate():
		return true, ReasonFromMigrate
	case e.op == OpNoop:
		return true, ReasonNoop
	case e.op != OpCommand:
		if isInternal(e.Namespace()) {
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
	internal := isInternal(d.NS)
	if d.Class == CmdRenameCollection {
		internal = internal && isInternal(d.To)
	}
	if internal {
		return true, ReasonInternal
	}
	return false, ""
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
