package shardsim

import (
	"math/rand/v2"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Behaviours are what mongod does that the first model left out, each
// switched on or off per schedule (doc.go names the server file each
// comes from). The zero value is the first model: one cluster clock,
// fromMigrate copies only, commitTimestamp after every prepare.
type Behaviours struct {
	// Version is the shards' MongoDB version (44, 50, 60, 70 or 80): it
	// picks the config.* document shapes and, on 44, $v:1 updates.
	Version int
	// FCV is the cluster's featureCompatibilityVersion (Version when
	// zero): a 6.0 binary may still run at 50. It does not change the
	// inserts: they carry their document key in o2 from the 5.3 binary
	// on, whatever the FCV (insertKey).
	FCV int
	// Clocks gives each shard its own hybrid logical clock: the wall
	// second and a counter, advanced past any cluster time a message
	// brings (a router, the other side of a migration, a transaction's
	// coordinator); entries of two shards can share a ts. Periodic no-ops
	// are written only after 10 s without a write.
	Clocks bool
	// ConfigDocs logs the config.* documents of a migration on the donor
	// and the recipient (migrationCoordinators, rangeDeletions,
	// migrationRecipients, collection_critical_sections) and makes the
	// recipient's copies of an aborted migration go through its range
	// deleter.
	ConfigDocs bool
	// RecordIDClone clones from the record ids taken at the clone's start,
	// in batches with donor writes between them: a document deleted
	// before its batch is not cloned and its delete logs nothing on the
	// recipient; inserts and updates reach the recipient only as
	// transferred mods after the clone.
	RecordIDClone bool
	// EmptyMigrations adds the event: every document of a chunk deleted,
	// the empty chunk migrated (the recipient logs no fromMigrate CRUD
	// entry), one of the _ids inserted again on the recipient.
	EmptyMigrations bool
	// Sessions makes some user writes retryable (lsid, txnNumber, stmtId)
	// and a migration copy each session's last write to the recipient as
	// $sessionMigrateInfo no-ops ($incompleteOplogHistory for a session
	// whose last write was a transaction).
	Sessions bool
	// Coordinator runs multi-shard transactions as the transaction
	// coordinator does: config.transaction_coordinators with the
	// participants on the coordinator shard, commitTimestamp the largest
	// prepare ts, the decision logged before the commits, some aborted.
	Coordinator bool
	// IDReuse adds the event: _id X deleted on one shard and inserted with
	// a shard key another shard owns.
	IDReuse bool
	// LateCommit delivers a committed transaction's commitTransaction to
	// some participants only after a client wrote again the documents the
	// committed participants hold (an update, or a move to a third
	// shard). The coordinator sends the commits once its decision is
	// durable and each participant logs its own when the message comes
	// (TransactionCoordinator::runCommit, s/transaction_coordinator.cpp).
	// The router answers the committing client at the decision on 5.0 to
	// 6.0 (coordinateCommitReturnImmediatelyAfterPersistingDecision,
	// true by default there) and after every participant's
	// acknowledgement on 4.4 and from 6.1; on every version another
	// client can read a committed participant's document, and write it,
	// before a late participant logs its commit.
	LateCommit bool
}

// With sets the model's behaviours (before its first write): the shards'
// wall clocks are skewed by up to a second, from the model's seed.
func (m *Model) With(b Behaviours) *Model {
	m.B = b
	rng := rand.New(rand.NewPCG(m.seed, 0xc10c))
	for _, s := range m.Shards {
		s.skew = uint32(rng.IntN(2))
	}
	return m
}

// versions are the MongoDB versions a schedule can pick.
var versions = []int{44, 50, 60, 70, 80}

// AllBehaviours returns every behaviour on, at a version rng picks.
func AllBehaviours(rng *rand.Rand) Behaviours {
	b := Behaviours{Version: versions[rng.IntN(len(versions))], Clocks: true, ConfigDocs: true,
		RecordIDClone: true, EmptyMigrations: true, Sessions: true, Coordinator: true, IDReuse: true, LateCommit: true}
	if b.Version == 60 && rng.IntN(2) == 0 {
		b.FCV = 50 // upgraded binaries, FCV not raised yet (inserts carry o2 all the same)
	}
	return b
}

// Without returns b with the behaviour named name off (the names of
// BehaviourNames).
func (b Behaviours) Without(name string) Behaviours { return b.set(name, false) }

// With returns b with the behaviour named name on.
func (b Behaviours) With(name string) Behaviours { return b.set(name, true) }

func (b Behaviours) set(name string, on bool) Behaviours {
	flags := map[string]*bool{"Clocks": &b.Clocks, "ConfigDocs": &b.ConfigDocs, "RecordIDClone": &b.RecordIDClone,
		"EmptyMigrations": &b.EmptyMigrations, "Sessions": &b.Sessions, "Coordinator": &b.Coordinator, "IDReuse": &b.IDReuse, "LateCommit": &b.LateCommit}
	if f := flags[name]; f != nil {
		*f = on
	}
	return b
}

// BehaviourNames names the switches of Behaviours.
var BehaviourNames = []string{"Clocks", "ConfigDocs", "RecordIDClone", "EmptyMigrations", "Sessions", "Coordinator", "IDReuse", "LateCommit"}

// epoch is the wall second of the model's first entry.
const epoch = 1_700_000_000

// noopInterval is the periodic no-op writer's period
// (periodicNoopIntervalSecs): it logs a no-op when nothing was written for
// that long.
const noopInterval = 10

// at returns the ts of s's next entry: the cluster's next tick, or with
// Clocks s's hybrid logical clock, max(wall, last + 1).
func (m *Model) at(s *Shard) bson.Timestamp {
	if !m.B.Clocks {
		return m.tick()
	}
	if w := epoch + m.wall + s.skew; w > s.hlc.T {
		s.hlc = bson.Timestamp{T: w, I: 1}
	} else {
		s.hlc.I++
	}
	return s.hlc
}

// see advances s's clock to ts (a message that carried it), as
// VectorClock::gossipIn does.
func (m *Model) see(s *Shard, ts bson.Timestamp) {
	if m.B.Clocks && ts.After(s.hlc) {
		s.hlc = ts
	}
}

// gossip carries from's cluster time to to (a request or a reply).
func (m *Model) gossip(from, to *Shard) { m.see(to, from.hlc) }

// route is a user write of document id about to be logged on s: the
// application's client and its router bring the cluster time of the
// document's last write (drivers gossip $clusterTime) and router r's.
func (m *Model) route(s *Shard, id int64) {
	if !m.B.Clocks || m.unrelated {
		return
	}
	m.see(s, m.lastWrite[id])
	r := m.rng.IntN(len(m.routers))
	m.see(s, m.routers[r])
	m.routerNext = r
}

// routed records the ts of a routed write.
func (m *Model) routed(id int64, ts bson.Timestamp) {
	if !m.B.Clocks {
		return
	}
	if ts.After(m.lastWrite[id]) {
		m.lastWrite[id] = ts
	}
	if ts.After(m.routers[m.routerNext]) {
		m.routers[m.routerNext] = ts
	}
}

// Elapse lets seconds of wall time pass. With Clocks, each shard that
// wrote nothing for noopInterval seconds logs a periodic no-op then
// (repl/noop_writer.cpp); without, it does nothing.
func (m *Model) Elapse(seconds uint32) {
	if !m.B.Clocks {
		return
	}
	end := m.wall + seconds
	for m.wall < end {
		m.wall++
		for _, s := range m.Shards {
			if s.Removed || s.Added.After(bson.Timestamp{T: epoch + m.wall}) {
				continue
			}
			if epoch+m.wall+s.skew >= s.Last().T+noopInterval {
				m.logNoop(s)
			}
		}
	}
}

// logNoop logs the periodic no-op on s.
func (m *Model) logNoop(s *Shard) {
	m.log(s, m.at(s), bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}})
}

// countLogs counts in Fired what the logs show of Clocks (entries whose ts
// another shard's entry shares) and ConfigDocs (a migration's config.*
// writes).
func (m *Model) countLogs() {
	seen := map[bson.Timestamp]string{}
	for _, s := range m.Shards {
		for _, e := range s.Log {
			ts := tsOf(e)
			if other, ok := seen[ts]; ok && other != s.Name {
				m.Fired["Clocks"]++
			}
			seen[ts] = s.Name
			if ns, _ := e.Lookup("ns").StringValueOK(); strings.HasPrefix(ns, "config.") && ns != nsCoordinators {
				m.Fired["ConfigDocs"]++
			}
		}
	}
}
