package conn

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Flavor names the server software behind a client.
type Flavor string

// Flavors the engine tells apart.
const (
	FlavorMongoDB  Flavor = "MongoDB"
	FlavorFerretDB Flavor = "FerretDB"
)

// UpdateShape says how a server logs an update in its oplog.
type UpdateShape uint8

// Update shapes.
const (
	// UpdatesAsApplied: the update is logged as what it did ($v:1
	// operators, a $v:2 diff, or the replacement document), as mongod
	// does. A $set there sets the fields it names and leaves the others.
	UpdatesAsApplied UpdateShape = iota
	// UpdatesAsWholeDocument: every update, replacements and $unset
	// included, is logged as {$v: 1, $set: <the whole new document>} with
	// o2 {_id} (FerretDB v1). A field the update removed is absent from
	// the logged document, so the entry must replace the document.
	UpdatesAsWholeDocument
)

// String names the shape for logs.
func (s UpdateShape) String() string {
	if s == UpdatesAsWholeDocument {
		return "whole document as $set"
	}
	return "as applied"
}

// FerretDBMaxWriteBatch caps a bulk write on a server that stalls on
// large bulks (FerretDB).
const FerretDBMaxWriteBatch = 50

// Profile is what the engine needs to know about one server, found once
// when a task opens: every difference between servers is read from here,
// never detected again elsewhere.
type Profile struct {
	// Flavor is the server software, Version its version (FerretDB's own
	// version on FerretDB).
	Flavor  Flavor
	Version string
	// Major is MongoDB's major version (buildInfo's versionArray); 0 on
	// FerretDB.
	Major int
	// OplogHasHoles: an oplog entry can become visible after entries with
	// a higher ts (FerretDB writes each entry after its write, outside any
	// ordering). MongoDB never shows one (visibility waits for earlier
	// writes).
	OplogHasHoles bool
	// IndexedRangeReads: a find on an _id range reads through the _id
	// index. False on FerretDB, where every range read scans and decodes
	// the whole collection.
	IndexedRangeReads bool
	// OplogQueriesScan: every query on the oplog reads and decodes all of
	// it (FerretDB v1: no pushdown of a ts range or of a sort, $natural
	// included, so even the newest entry costs a full scan; a tailable
	// cursor's getMore re-runs its query). The replay start position is
	// then read from the server's clock, and lag from the tailer's own
	// reads.
	OplogQueriesScan bool
	// MaxWriteBatch caps the writes of one bulk write on this server as a
	// target; 0 means no cap beyond the task's own.
	MaxWriteBatch int
	// UpdateShape is how the server logs updates in its oplog.
	UpdateShape UpdateShape
	// PipelineUpdates: the server applies pipeline-style updates
	// (MongoDB 4.2+; not FerretDB v1).
	PipelineUpdates bool
	// BulkWriteCommand: the server has the bulkWrite command (MongoDB
	// 8.0+), which carries writes of many namespaces and kinds in one
	// command; not FerretDB v1.
	BulkWriteCommand bool
	// IndexesOneByOne: build a collection's indexes with one createIndexes
	// command each. FerretDB v1 (SQLite) leaves its index registry broken
	// for good when a createIndexes of several indexes loses its client
	// midway (a killed worker): every later createIndexes on that
	// collection then fails. One index per command is not affected
	// (test/chaos TestFerretDBCreateIndexesAfterInterruptedBuild).
	// MongoDB builds a command's indexes in one collection scan, so it
	// gets them all at once.
	IndexesOneByOne bool
	// SerialUpdates: send update and delete commands to one database of
	// this server as a replay target one at a time. FerretDB v1 (SQLite)
	// can stop answering for good when update commands on one database
	// run concurrently: each reads, then writes, in a transaction of its
	// own, and they wait on each other in its connection pool (four
	// clients sending bulks of updates hang it within a round; inserts
	// and deletes do not). Deletes do not hang it, but cost more
	// concurrently than one after the other (replay's applier).
	SerialUpdates bool
	// ReinsertReplacements: as a replay target, apply a run of
	// replacement upserts by _id as one delete of their _ids and one
	// insert of their new versions. FerretDB v1 spends tens of
	// milliseconds on each update statement, batched or not (measured
	// 11-95 statements/s on a 1,057-document collection), against a few
	// milliseconds a document for the delete by {_id: {$in}} and the
	// insert; a FerretDB source logs every update as a replacement, so
	// one updateMany there is such a run.
	ReinsertReplacements bool
}

// MongoDBProfile is the profile of a MongoDB server: the default for
// a server that does not say otherwise.
var MongoDBProfile = Profile{Flavor: FlavorMongoDB, IndexedRangeReads: true, UpdateShape: UpdatesAsApplied, PipelineUpdates: true}

// FerretDBProfile is the profile of a FerretDB v1 server.
var FerretDBProfile = Profile{
	Flavor: FlavorFerretDB, OplogHasHoles: true, OplogQueriesScan: true, IndexedRangeReads: false,
	MaxWriteBatch: FerretDBMaxWriteBatch, UpdateShape: UpdatesAsWholeDocument, IndexesOneByOne: true,
	SerialUpdates: true, ReinsertReplacements: true,
}

// ProbeProfile asks a server who it is (buildInfo) and returns its
// profile.
func ProbeProfile(ctx context.Context, c *mongo.Client) (Profile, error) {
	raw, err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return Profile{}, fmt.Errorf("buildInfo: %w; the engine asks every server which software it runs before it reads or writes anything: check that the user may run buildInfo", err)
	}
	return profileFromBuildInfo(raw), nil
}

// profileFromBuildInfo reads a buildInfo reply: FerretDB names itself in
// ferretdbVersion (MongoDB has no such field).
func profileFromBuildInfo(raw bson.Raw) Profile {
	if v, ok := raw.Lookup("ferretdbVersion").StringValueOK(); ok {
		p := FerretDBProfile
		p.Version = v
		return p
	}
	p := MongoDBProfile
	p.Version, _ = raw.Lookup("version").StringValueOK()
	p.Major = majorVersion(raw)
	p.BulkWriteCommand = p.Major >= 8
	return p
}

// majorVersion is the first element of buildInfo's versionArray, or of
// its version string when the array is missing; 0 when neither says.
func majorVersion(raw bson.Raw) int {
	if arr, ok := raw.Lookup("versionArray").ArrayOK(); ok {
		if vs, err := arr.Values(); err == nil && len(vs) > 0 {
			if n, ok := vs[0].AsInt64OK(); ok {
				return int(n)
			}
		}
	}
	v, _ := raw.Lookup("version").StringValueOK()
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}
