package shardsim

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The config.* namespaces a migration and a transaction coordinator
// write on the shards.
const (
	nsCoordinators     = "config.transaction_coordinators"
	nsMigCoordinators  = "config.migrationCoordinators"
	nsRangeDeletions   = "config.rangeDeletions"
	nsMigRecipients    = "config.migrationRecipients"
	nsCriticalSections = "config.collection_critical_sections"
)

// rangeTask is a config.rangeDeletions document (s/range_deletion_task.idl).
type rangeTask struct {
	id    bson.Binary
	donor string
	c     int
	// whenToClean is "now" on the recipient, "delayed" on the donor
	// (moveChunk without _waitForDelete).
	whenToClean string
	created     bson.Timestamp
}

// uuid returns the next migration id.
func (m *Model) uuid() bson.Binary {
	m.uuids++
	return bson.Binary{Subtype: 4, Data: fmt.Appendf(nil, "migration%07d", m.uuids)}
}

// cfgCRUD is a write of a config.* document, as the shard's primary logs
// it (no fromMigrate; ui the collection's).
func (m *Model) cfgCRUD(op, ns string, o, o2 bson.D) bson.D {
	ui := bson.Binary{Subtype: 4, Data: fmt.Appendf(nil, "%-16.16s", ns[len("config."):])}
	e := bson.D{{Key: "op", Value: op}, {Key: "ns", Value: ns}, {Key: "ui", Value: ui}, {Key: "o", Value: o}}
	if o2 != nil {
		e = append(e, bson.E{Key: "o2", Value: o2})
	}
	return e
}

// cfgUpdate is an update of fields ($set) and unset (names) of document
// _id of ns: a $v:2 diff from 5.0, $v:1 operators on 4.4.
func (m *Model) cfgUpdate(ns string, id any, set bson.D, unset ...string) bson.D {
	var o bson.D
	if m.B.Version == 44 {
		o = bson.D{{Key: "$v", Value: int32(1)}}
		if set != nil {
			o = append(o, bson.E{Key: "$set", Value: set})
		}
		if len(unset) > 0 {
			var u bson.D
			for _, n := range unset {
				u = append(u, bson.E{Key: n, Value: true})
			}
			o = append(o, bson.E{Key: "$unset", Value: u})
		}
	} else {
		var diff bson.D
		if len(unset) > 0 {
			var d bson.D
			for _, n := range unset {
				d = append(d, bson.E{Key: n, Value: false})
			}
			diff = append(diff, bson.E{Key: "d", Value: d})
		}
		if set != nil {
			diff = append(diff, bson.E{Key: "u", Value: set})
		}
		o = bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: diff}}
	}
	return m.cfgCRUD("u", ns, o, bson.D{{Key: "_id", Value: id}})
}

// chunkRange is chunk c's range as the config documents hold it.
func chunkRange(c int) bson.D {
	var lo, hi any = int64(c * chunkWidth), int64((c + 1) * chunkWidth)
	if c == 0 {
		lo = bson.MinKey{}
	}
	if c == chunkCount-1 {
		hi = bson.MaxKey{}
	}
	return bson.D{{Key: "min", Value: bson.D{{Key: "sk", Value: lo}}}, {Key: "max", Value: bson.D{{Key: "sk", Value: hi}}}}
}

// placement is a ChunkVersion as 6.0+ documents hold it.
func placement(ts bson.Timestamp) bson.D {
	return bson.D{{Key: "e", Value: bson.ObjectID{0x65, 0x5e, 0x1a}}, {Key: "t", Value: bson.Timestamp{T: epoch, I: 1}}, {Key: "v", Value: ts}}
}

// taskDoc is t's document (pending while the migration runs).
func (m *Model) taskDoc(t *rangeTask) bson.D {
	d := bson.D{{Key: "_id", Value: t.id}, {Key: "nss", Value: m.NS}, {Key: "collectionUuid", Value: m.ui},
		{Key: "donorShardId", Value: t.donor}, {Key: "range", Value: chunkRange(t.c)},
		{Key: "pending", Value: true}, {Key: "whenToClean", Value: t.whenToClean}}
	if m.B.Version >= 60 {
		d = append(d, bson.E{Key: "timestamp", Value: t.created}, bson.E{Key: "numOrphanDocs", Value: int64(0)})
	}
	if m.B.Version >= 70 {
		d = append(d, bson.E{Key: "keyPattern", Value: bson.D{{Key: "sk", Value: int32(1)}}})
	}
	if m.B.Version >= 80 {
		d = append(d, bson.E{Key: "preMigrationShardVersion", Value: placement(t.created)})
	}
	return d
}

// insertTask logs the insert of a pending range-deletion task on s.
func (m *Model) insertTask(s *Shard, t *rangeTask) {
	ts := m.at(s)
	t.created = ts
	m.log(s, ts, m.cfgCRUD("i", nsRangeDeletions, m.taskDoc(t), nil))
}

// taskProcessing logs what the range deleter writes on s before it
// deletes t's range: 7.0+ marks it processing.
func (m *Model) taskProcessing(s *Shard, t *rangeTask) {
	if m.B.Version >= 70 {
		m.log(s, m.at(s), m.cfgUpdate(nsRangeDeletions, t.id, bson.D{{Key: "processing", Value: true}}))
	}
}

// taskDone logs what the range deleter writes on s after deleting n
// documents of t's range: 6.0+ counts them off numOrphanDocs, then the
// task is deleted.
func (m *Model) taskDone(s *Shard, t *rangeTask, n int) {
	if m.B.Version >= 60 && n > 0 {
		m.log(s, m.at(s), m.cfgUpdate(nsRangeDeletions, t.id, bson.D{{Key: "numOrphanDocs", Value: int64(0)}}))
	}
	m.log(s, m.at(s), m.cfgCRUD("d", nsRangeDeletions, bson.D{{Key: "_id", Value: t.id}}, nil))
}

// Migration is one chunk migration under way (migrate, or a scenario
// step by step).
type Migration struct {
	m        *Model
	c        int
	from, to *Shard
	id       bson.Binary
	donor    *rangeTask
	recv     *rangeTask
	// has are the _ids the recipient holds; mods the _ids the donor
	// queued for transfer since the last transfer ('d' deleted, 'r'
	// reload), in order.
	has  map[int64]bool
	mods []mod
	// cloned counts the recipient's documents for numOrphanDocs.
	cloned int64
	// ids are the record ids taken at the clone's start, next the first
	// not cloned yet.
	ids  []int64
	next int
	// deleted are the documents the donor deleted during the migration,
	// skipped those of them the clone skipped.
	deleted map[int64]Doc
	skipped []Doc
	// inCritSec is set once the 6.0+ recipient holds its critical
	// section.
	inCritSec bool
}

type mod struct {
	id   int64
	kind byte
}

// migrate is Migrate with Behaviours: what MigrationSourceManager,
// MigrationChunkClonerSource, MigrationDestinationManager and
// MigrationCoordinator log on the donor and the recipient, in order:
//
//  1. donor: config.migrationCoordinators inserted, then its own pending
//     range-deletion task (whenToClean "delayed") (ConfigDocs);
//  2. recipient: its pending range-deletion task (whenToClean "now");
//  3. the clone: from the record ids taken at its start, in batches,
//     donor writes between them (RecordIDClone; otherwise every document
//     at once); a document deleted before its batch is skipped; 6.0+
//     counts each batch into the task's numOrphanDocs;
//  4. the transferred mods, deletes first (only of _ids the recipient
//     has), then reloads of the donor's current documents (those it
//     still has); catch-up writes, each followed by a transfer;
//  5. session migration (Sessions);
//  6. 6.0+: config.migrationRecipients and the recipient's critical
//     section (blockReads false, then true);
//  7. commit: 6.0+ the recipient's critical section and recovery
//     document deleted; donor: decision "committed", the recipient's
//     task deleted, the donor's made ready (pending unset), the
//     coordinator document deleted; the donor's range deleter runs later
//     (RangeDelete). Abort (after the clone): decision "aborted", the
//     donor's task deleted, the recipient's made ready (its range deleter
//     deletes the copies later), the coordinator document deleted.
func (m *Model) migrate(c int, to *Shard, catchUp int, abort bool) {
	g := m.StartMigration(c, to)
	batch := 1 + m.rng.IntN(3)
	if !m.B.RecordIDClone {
		batch = len(g.ids) + 1
	}
	left := catchUp
	// An abort comes at any point: during the clone (the recipient
	// failed), after it, or (6.0+) inside the recipient's critical
	// section (the commit on the config server failed).
	stopAt := len(g.ids)
	if abort && m.B.RecordIDClone && m.rng.IntN(2) == 0 {
		stopAt = m.rng.IntN(len(g.ids) + 1)
	}
	for g.next < stopAt {
		if m.B.RecordIDClone && left > 0 && m.rng.IntN(2) == 0 {
			if id, ok := g.uncloned(); ok && m.rng.IntN(2) == 0 {
				g.DonorDelete(id)
			} else {
				g.donorWrite()
			}
			left--
		}
		g.Clone(batch)
	}
	g.Transfer()
	for range left {
		g.donorWrite()
		g.Transfer()
	}
	if abort {
		if m.rng.IntN(3) == 0 {
			g.critSec()
		}
		g.Abort()
		return
	}
	g.Commit()
	// The application inserts again, now on the recipient, a document
	// the clone skipped (case 2 of docs/oplog-shapes.md's migration).
	for _, d := range g.skipped {
		if _, ok := m.Docs[d.ID]; !ok && m.rng.IntN(2) == 0 {
			m.InsertID(d.ID, d.SK)
		}
	}
}

// StartMigration starts moving chunk c to shard to: steps 1 and 2, and
// the record ids of the clone taken.
func (m *Model) StartMigration(c int, to *Shard) *Migration {
	from := m.owner[c]
	m.RangeDelete(to) // a shard receives a range only once its orphans are gone
	g := &Migration{m: m, c: c, from: from, to: to, id: m.uuid(), has: map[int64]bool{}}
	m.gossip(from, to)
	g.start()
	g.ids = m.inChunk(c)
	return g
}

// Clone clones the next n record ids (all that are left when n < 0).
func (g *Migration) Clone(n int) {
	if n < 0 || g.next+n > len(g.ids) {
		n = len(g.ids) - g.next
	}
	g.cloneBatch(g.ids[g.next : g.next+n])
	g.next += n
}

// uncloned picks a document of the chunk whose batch is still to come.
func (g *Migration) uncloned() (int64, bool) {
	var ids []int64
	for _, id := range g.ids[g.next:] {
		if d, ok := g.m.Docs[id]; ok && int(d.SK/chunkWidth) == g.c {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, false
	}
	return ids[g.m.rng.IntN(len(ids))], true
}

// DonorDelete deletes document id on the donor (a user's write, queued
// for transfer).
func (g *Migration) DonorDelete(id int64) {
	if g.deleted == nil {
		g.deleted = map[int64]Doc{}
	}
	g.deleted[id] = g.m.Docs[id]
	g.m.Delete(id)
	g.mods = append(g.mods, mod{id, 'd'})
}

// DonorUpdate updates document id on the donor.
func (g *Migration) DonorUpdate(id int64) {
	g.m.Update(id)
	g.mods = append(g.mods, mod{id, 'r'})
}

// DonorInsert inserts a document with shard key sk on the donor.
func (g *Migration) DonorInsert(sk int64) Doc {
	d := g.m.Insert(sk)
	g.mods = append(g.mods, mod{d.ID, 'r'})
	return d
}

// sessions logs step 5.
func (g *Migration) sessions() {
	if g.m.B.Sessions {
		g.m.migrateSessions(g.from, g.to, g.c)
	}
}

// start logs steps 1 and 2.
func (g *Migration) start() {
	m := g.m
	if !m.B.ConfigDocs {
		return
	}
	g.donor = &rangeTask{id: g.id, donor: g.from.Name, c: g.c, whenToClean: "delayed"}
	g.recv = &rangeTask{id: g.id, donor: g.from.Name, c: g.c, whenToClean: "now"}
	lsid, n := m.session()
	m.log(g.from, m.at(g.from), m.cfgCRUD("i", nsMigCoordinators, bson.D{
		{Key: "_id", Value: g.id}, {Key: "migrationSessionId", Value: fmt.Sprintf("%s_%s_%s", g.from.Name, g.to.Name, "655e1a000000000000000000")},
		{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: n}, {Key: "nss", Value: m.NS}, {Key: "collectionUuid", Value: m.ui},
		{Key: "donorShardId", Value: g.from.Name}, {Key: "recipientShardId", Value: g.to.Name}, {Key: "range", Value: chunkRange(g.c)},
		{Key: "preMigrationChunkVersion", Value: placement(g.from.Last())}}, nil))
	m.insertTask(g.from, g.donor)
	m.gossip(g.from, g.to)
	m.insertTask(g.to, g.recv)
}

// cloneBatch copies the documents of ids the donor still has.
func (g *Migration) cloneBatch(ids []int64) {
	m := g.m
	m.gossip(g.from, g.to)
	n := 0
	for _, id := range ids {
		d, ok := m.Docs[id]
		if !ok || int(d.SK/chunkWidth) != g.c {
			if old, ok := g.deleted[id]; ok {
				g.skipped = append(g.skipped, old)
			}
			m.Fired["RecordIDClone"]++
			continue // deleted (or moved) since the record ids were taken
		}
		m.log(g.to, m.at(g.to), m.crud("i", d.raw(), nil, true))
		g.has[id] = true
		n++
	}
	if m.B.ConfigDocs && m.B.Version >= 60 && n > 0 {
		g.cloned += int64(n)
		m.log(g.to, m.at(g.to), m.cfgUpdate(nsRangeDeletions, g.id, bson.D{{Key: "numOrphanDocs", Value: g.cloned}}))
	}
}

// donorWrite is a user write in the chunk on the donor, queued for
// transfer.
func (g *Migration) donorWrite() {
	m := g.m
	ids := m.inChunk(g.c)
	switch p := m.rng.IntN(3); {
	case p == 0 || len(ids) == 0:
		g.DonorInsert(int64(g.c*chunkWidth + m.rng.IntN(chunkWidth)))
	case p == 1:
		g.DonorUpdate(ids[m.rng.IntN(len(ids))])
	default:
		g.DonorDelete(ids[m.rng.IntN(len(ids))])
	}
}

// Transfer applies the queued mods on the recipient (_applyMigrateOp):
// deletes of the _ids it has, then the donor's current documents.
func (g *Migration) Transfer() {
	m := g.m
	if len(g.mods) == 0 {
		return
	}
	m.gossip(g.from, g.to)
	seen := map[int64]bool{}
	for _, md := range g.mods {
		if md.kind == 'd' && g.has[md.id] {
			m.log(g.to, m.at(g.to), m.crud("d", bson.D{{Key: "_id", Value: md.id}}, nil, true))
			delete(g.has, md.id)
		}
	}
	for _, md := range g.mods {
		d, ok := m.Docs[md.id]
		if md.kind != 'r' || seen[md.id] || !ok || int(d.SK/chunkWidth) != g.c {
			continue
		}
		seen[md.id] = true
		if g.has[md.id] {
			m.log(g.to, m.at(g.to), m.crud("u", d.raw(), bson.D{{Key: "_id", Value: md.id}}, true))
		} else {
			m.log(g.to, m.at(g.to), m.crud("i", d.raw(), nil, true))
			g.has[md.id] = true
		}
	}
	g.mods = nil
	m.gossip(g.to, g.from)
}

// critSec logs the 6.0+ recipient's recovery document and critical
// section before the commit.
func (g *Migration) critSec() {
	m := g.m
	if !m.B.ConfigDocs || m.B.Version < 60 || g.inCritSec {
		return
	}
	g.inCritSec = true
	lsid, n := m.session()
	m.log(g.to, m.at(g.to), m.cfgCRUD("i", nsMigRecipients, bson.D{
		{Key: "_id", Value: g.id}, {Key: "nss", Value: m.NS}, {Key: "migrationSessionId", Value: fmt.Sprintf("%s_%s_%s", g.from.Name, g.to.Name, "655e1a000000000000000000")},
		{Key: "range", Value: chunkRange(g.c)}, {Key: "donorShardIdForLoggingPurposesOnly", Value: g.from.Name},
		{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: n}}, nil))
	reason := bson.D{{Key: "command", Value: "migrate"}, {Key: "migrationId", Value: g.id}}
	m.log(g.to, m.at(g.to), m.cfgCRUD("i", nsCriticalSections, bson.D{{Key: "_id", Value: m.NS}, {Key: "reason", Value: reason}, {Key: "blockReads", Value: false}}, nil))
	m.log(g.to, m.at(g.to), m.cfgUpdate(nsCriticalSections, m.NS, bson.D{{Key: "blockReads", Value: true}}))
}

// release logs the 6.0+ recipient's release of its critical section
// (_recvChunkReleaseCritSec) and the deletion of its recovery document.
func (g *Migration) release() {
	m := g.m
	if !g.inCritSec {
		return
	}
	g.inCritSec = false
	m.gossip(g.from, g.to)
	m.log(g.to, m.at(g.to), m.cfgCRUD("d", nsCriticalSections, bson.D{{Key: "_id", Value: m.NS}}, nil))
	m.log(g.to, m.at(g.to), m.cfgCRUD("d", nsMigRecipients, bson.D{{Key: "_id", Value: g.id}}, nil))
}

// Commit migrates the sessions, logs step 7's commit and hands the chunk
// over.
func (g *Migration) Commit() {
	m := g.m
	g.Transfer()
	g.sessions()
	m.Migrations++
	g.critSec()
	m.gossip(g.to, g.from)
	// The commit on the config server: the routers see it.
	for i := range m.routers {
		if g.from.hlc.After(m.routers[i]) {
			m.routers[i] = g.from.hlc
		}
	}
	m.owner[g.c] = g.to
	ids := m.inChunk(g.c)
	if m.B.ConfigDocs {
		g.release()
		m.log(g.from, m.at(g.from), m.cfgUpdate(nsMigCoordinators, g.id, bson.D{{Key: "decision", Value: "committed"}}))
		m.gossip(g.from, g.to)
		m.log(g.to, m.at(g.to), m.cfgCRUD("d", nsRangeDeletions, bson.D{{Key: "_id", Value: g.id}}, nil))
		m.gossip(g.to, g.from)
		m.log(g.from, m.at(g.from), m.cfgUpdate(nsRangeDeletions, g.id, nil, "pending"))
		m.log(g.from, m.at(g.from), m.cfgCRUD("d", nsMigCoordinators, bson.D{{Key: "_id", Value: g.id}}, nil))
	}
	m.orphans[g.from] = append(m.orphans[g.from], orphans{ids: ids, task: g.donor})
}

// Abort logs step 7's abort (during the clone, after it, or inside the
// recipient's critical section): the recipient's copies go to its range
// deleter (with ConfigDocs) or are deleted at once.
func (g *Migration) Abort() {
	m := g.m
	if g.next == len(g.ids) {
		g.Transfer() // the mods go only after a whole clone
	}
	g.sessions()
	m.Migrations++
	m.Aborted++
	copies := sortedIDs(g.has)
	if !m.B.ConfigDocs {
		for _, id := range copies {
			m.log(g.to, m.at(g.to), m.crud("d", bson.D{{Key: "_id", Value: id}}, nil, true))
		}
		return
	}
	g.release()
	m.log(g.from, m.at(g.from), m.cfgUpdate(nsMigCoordinators, g.id, bson.D{{Key: "decision", Value: "aborted"}}))
	m.log(g.from, m.at(g.from), m.cfgCRUD("d", nsRangeDeletions, bson.D{{Key: "_id", Value: g.id}}, nil))
	m.gossip(g.from, g.to)
	m.log(g.to, m.at(g.to), m.cfgUpdate(nsRangeDeletions, g.id, nil, "pending"))
	m.gossip(g.to, g.from)
	m.log(g.from, m.at(g.from), m.cfgCRUD("d", nsMigCoordinators, bson.D{{Key: "_id", Value: g.id}}, nil))
	m.orphans[g.to] = append(m.orphans[g.to], orphans{ids: copies, task: g.recv})
}
