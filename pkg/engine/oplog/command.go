package oplog

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// CommandClass is what a command entry ('c') does, named after the first
// field of its o.
type CommandClass uint8

// The command classes.
const (
	// CmdNone: the entry is not a command.
	CmdNone CommandClass = iota

	// DDL, replayed as barriers (DDL values from Translate).
	CmdCreate
	CmdDrop
	CmdRenameCollection
	CmdDropDatabase
	CmdCreateIndexes
	CmdCommitIndexBuild
	CmdDropIndexes
	CmdCollMod
	// CmdEmptyCapped empties a capped collection ({emptycapped: coll},
	// logged by mongod's onEmptyCapped); replayed as a delete of every
	// document.
	CmdEmptyCapped

	// Skipped: index builds are replayed from their commitIndexBuild
	// entry, which carries the index specifications; dbCheck only checks.
	CmdStartIndexBuild
	CmdAbortIndexBuild
	CmdDBCheck

	// Transactions, handled by the Assembler.
	CmdApplyOps
	CmdCommitTransaction
	CmdAbortTransaction

	// CmdUnknown: any other command. Translate refuses it (ErrUnknownCommand).
	CmdUnknown
)

var commandNames = [...]string{
	CmdNone: "", CmdCreate: "create", CmdDrop: "drop", CmdRenameCollection: "renameCollection",
	CmdDropDatabase: "dropDatabase", CmdCreateIndexes: "createIndexes", CmdCommitIndexBuild: "commitIndexBuild",
	CmdDropIndexes: "dropIndexes", CmdCollMod: "collMod", CmdEmptyCapped: "emptycapped", CmdStartIndexBuild: "startIndexBuild",
	CmdAbortIndexBuild: "abortIndexBuild", CmdDBCheck: "dbCheck", CmdApplyOps: "applyOps",
	CmdCommitTransaction: "commitTransaction", CmdAbortTransaction: "abortTransaction", CmdUnknown: "unknown",
}

// String returns the command's name ("unknown" for CmdUnknown).
func (c CommandClass) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	return "unknown"
}

// IsDDL reports whether the class is DDL replayed on the target.
func (c CommandClass) IsDDL() bool { return c >= CmdCreate && c <= CmdEmptyCapped }

// IsTxn reports whether the class is a transaction entry for the Assembler.
func (c CommandClass) IsTxn() bool { return c >= CmdApplyOps && c <= CmdAbortTransaction }

// Skipped reports whether entries of this class are skipped (see Skip).
func (c CommandClass) Skipped() bool { return c >= CmdStartIndexBuild && c <= CmdDBCheck }

// classify names a command by the first field of its o.
func classify(name string) CommandClass {
	switch name {
	case "create":
		return CmdCreate
	case "drop":
		return CmdDrop
	case "renameCollection":
		return CmdRenameCollection
	case "dropDatabase":
		return CmdDropDatabase
	case "createIndexes":
		return CmdCreateIndexes
	case "commitIndexBuild":
		return CmdCommitIndexBuild
	case "dropIndexes", "deleteIndexes", "deleteIndex":
		return CmdDropIndexes
	case "collMod":
		return CmdCollMod
	case "emptycapped":
		return CmdEmptyCapped
	case "startIndexBuild":
		return CmdStartIndexBuild
	case "abortIndexBuild":
		return CmdAbortIndexBuild
	case "dbCheck":
		return CmdDBCheck
	case "applyOps":
		return CmdApplyOps
	case "commitTransaction":
		return CmdCommitTransaction
	case "abortTransaction":
		return CmdAbortTransaction
	}
	return CmdUnknown
}

// DDL describes a DDL command entry. The replayer applies it as a barrier:
// it drains the writers, applies the command once on the target, and goes
// on. Names are the source's: Map turns them into the target's.
type DDL struct {
	// Class is the command.
	Class CommandClass
	// NS is the collection the command acts on; for dropDatabase Coll is
	// empty; for renameCollection it is the collection renamed.
	NS catalog.Namespace
	// To is the new name of a renameCollection (zero otherwise).
	To catalog.Namespace
	// Command is the entry's o, the command as the source logged it.
	Command bson.Raw
	// O2 is the entry's o2, when present (drop and dropIndexes log what
	// they dropped there).
	O2 bson.Raw
}

// DDL returns the DDL description of a command entry whose class IsDDL.
func (e Entry) DDL() (DDL, error) {
	d, err := e.ddl()
	if err != nil {
		return DDL{}, fmt.Errorf("%s: %w", e, err)
	}
	return d, nil
}

// ddl is DDL without the entry in its errors.
func (e Entry) ddl() (DDL, error) {
	d := DDL{Class: e.cmd, Command: e.o, O2: e.o2}
	if !e.cmd.IsDDL() {
		return DDL{}, fmt.Errorf("%s is not a DDL command", e.cmd)
	}
	db, _ := strings.CutSuffix(e.ns, ".$cmd")
	elem, err := bsoncore.Document(e.o).IndexErr(0)
	if err != nil {
		return DDL{}, fmt.Errorf("%w: %v", ErrMalformedEntry, err)
	}
	first := elem.Value()
	switch e.cmd {
	case CmdDropDatabase:
		d.NS = catalog.Namespace{DB: db}
	case CmdRenameCollection:
		from, ok := first.StringValueOK()
		to, ok2 := lookupString(e.o, "to")
		if !ok || !ok2 || checkCollNS(from) != nil || checkCollNS(to) != nil {
			return DDL{}, fmt.Errorf("%w: renameCollection needs two db.collection names (renameCollection, to)", ErrMalformedEntry)
		}
		d.NS, d.To = catalog.ParseNamespace(from), catalog.ParseNamespace(to)
	default:
		coll, ok := first.StringValueOK()
		if !ok || coll == "" {
			return DDL{}, fmt.Errorf("%w: %s must name a collection", ErrMalformedEntry, e.cmd)
		}
		d.NS = catalog.Namespace{DB: db, Coll: coll}
	}
	return d, nil
}

// lookupString returns the string field key of doc.
func lookupString(doc []byte, key string) (string, bool) {
	v, found, err := lookup(doc, key)
	if err != nil || !found {
		return "", false
	}
	return v.StringValueOK()
}

// Map returns the DDL with its namespaces renamed for the target (pass
// catalog.Mapper.Target). Both names of a renameCollection are mapped.
// The command document is left as the source wrote it: the sink builds the
// target's command from NS, To and the accessors below.
//
// For dropDatabase, Map renames the database; collections that a
// collection rename moved to another database are not dropped with it.
func (d DDL) Map(target func(catalog.Namespace) catalog.Namespace) DDL {
	d.NS = target(d.NS)
	if d.Class == CmdRenameCollection {
		d.To = target(d.To)
	}
	return d
}

// Options returns, for create and collMod, the command's fields after its
// name: the collection options (capped, validator, viewOn, ...) or the
// modifications.
func (d DDL) Options() (bson.Raw, error) {
	if d.Class != CmdCreate && d.Class != CmdCollMod {
		return nil, fmt.Errorf("%s has no collection options", d.Class)
	}
	return withoutFirst(d.Command)
}

// Indexes returns the index specifications of a createIndexes (the
// command's fields after its name) or commitIndexBuild (its indexes
// array) entry.
func (d DDL) Indexes() ([]bson.Raw, error) {
	switch d.Class {
	case CmdCreateIndexes:
		spec, err := withoutFirst(d.Command)
		if err != nil {
			return nil, err
		}
		return []bson.Raw{spec}, nil
	case CmdCommitIndexBuild:
		v, found, err := lookup(d.Command, "indexes")
		if err != nil {
			return nil, err
		}
		if !found || v.Type != bsoncore.TypeArray {
			return nil, fmt.Errorf("%w: commitIndexBuild on %s has no indexes array", ErrMalformedEntry, d.NS)
		}
		var specs []bson.Raw
		err = forEach(v.Data, func(_ []byte, v bsoncore.Value) error {
			doc, ok := document(v)
			if !ok || v.Type != bsoncore.TypeEmbeddedDocument {
				return fmt.Errorf("%w: commitIndexBuild on %s: an index is a %s, not a document", ErrMalformedEntry, d.NS, v.Type)
			}
			specs = append(specs, bson.Raw(doc))
			return nil
		})
		return specs, err
	}
	return nil, fmt.Errorf("%s has no index specifications", d.Class)
}

// DropIndexNames returns the names of the indexes a dropIndexes entry
// drops (its index field: a name, or a list of names; "*" means all).
func (d DDL) DropIndexNames() ([]string, error) {
	if d.Class != CmdDropIndexes {
		return nil, fmt.Errorf("%s drops no indexes", d.Class)
	}
	v, found, err := lookup(d.Command, "index")
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: dropIndexes on %s has no index field", ErrMalformedEntry, d.NS)
	}
	if s, ok := v.StringValueOK(); ok {
		return []string{s}, nil
	}
	if v.Type != bsoncore.TypeArray {
		return nil, fmt.Errorf("%w: dropIndexes on %s: index is a %s (an index key pattern cannot be dropped by name)", ErrMalformedEntry, d.NS, v.Type)
	}
	var names []string
	err = forEach(v.Data, func(_ []byte, v bsoncore.Value) error {
		s, ok := v.StringValueOK()
		if !ok {
			return fmt.Errorf("%w: dropIndexes on %s: index names must be strings", ErrMalformedEntry, d.NS)
		}
		names = append(names, s)
		return nil
	})
	return names, err
}

// DropTarget reports whether a renameCollection replaces an existing
// collection (dropTarget true, or the UUID of the dropped collection).
func (d DDL) DropTarget() bool {
	if d.Class != CmdRenameCollection {
		return false
	}
	v, found, err := lookup(d.Command, "dropTarget")
	if err != nil || !found {
		return false
	}
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	return v.Type == bsoncore.TypeBinary
}

// withoutFirst returns doc without its first element.
func withoutFirst(doc bson.Raw) (bson.Raw, error) {
	b := start(make([]byte, 0, len(doc)))
	first := true
	err := forEach(doc, func(k []byte, v bsoncore.Value) error {
		if first {
			first = false
			return nil
		}
		b.value(string(k), v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return bson.Raw(b.finish()), nil
}
