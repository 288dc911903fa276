package shardsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Doc is a document of the model's sharded collection: _id, the shard key
// sk and a version v.
type Doc struct{ ID, SK, V int64 }

// raw returns the document as the server stores it.
func (d Doc) raw() bson.D {
	return bson.D{{Key: "_id", Value: d.ID}, {Key: "sk", Value: d.SK}, {Key: "v", Value: d.V}}
}

// Lookup is the source's find of one document by filter ({_id} and
// optionally sk) through mongos once the schedule is written: the
// collection as it ends (Docs), which a replayer reads ahead of what it
// has applied, as it reads a live source. nil when none matches. at is
// the $clusterTime mongos answers with (ReadAt; without Finish, the
// highest entry of any shard), every write being in the collection as
// it ends.
func (m *Model) Lookup(_ context.Context, _ catalog.Namespace, filter bson.Raw) (doc bson.Raw, at bson.Timestamp, err error) {
	at = m.ReadAt
	for _, s := range m.Shards {
		if l := s.Last(); at.IsZero() && l.After(at) {
			at = l
		}
	}
	id, ok := filter.Lookup("_id").AsInt64OK()
	if !ok {
		return nil, at, fmt.Errorf("lookup by %s: the model finds documents by their int64 _id", filter)
	}
	d, ok := m.Docs[id]
	if !ok {
		return nil, at, nil
	}
	if sk, err := filter.LookupErr("sk"); err == nil && sk.AsInt64() != d.SK {
		return nil, at, nil
	}
	doc, err = bson.Marshal(d.raw())
	return doc, at, err
}

// key returns its document key, shard key first.
func (d Doc) key() bson.D { return bson.D{{Key: "sk", Value: d.SK}, {Key: "_id", Value: d.ID}} }

// WriteKey identifies a user write as a subtask applies it: the shard, the
// ts of the entry (or transaction commit) it comes from, and the _id.
type WriteKey struct {
	Shard string
	TS    bson.Timestamp
	ID    int64
}

// Write is one user write of a document.
type Write struct {
	WriteKey
	// Seq is the write's place among the document's writes (from 1); the
	// two parts of a shard-key change share one.
	Seq int
	// Kind is 'i', 'u' or 'd'.
	Kind byte
}

// Shard is one shard's oplog.
type Shard struct {
	Name string
	Log  []bson.Raw
	// Added is the cluster time the shard joined (zero: from the start);
	// Removed is set once it was drained and removed.
	Added   bson.Timestamp
	Removed bool
	// Idle shards own no chunk and write only no-ops.
	Idle bool

	// hlc is the shard's hybrid logical clock (Behaviours.Clocks), skew
	// its wall clock's offset in seconds.
	hlc  bson.Timestamp
	skew uint32
}

// Last returns the ts of the shard's last entry.
func (s *Shard) Last() bson.Timestamp {
	if len(s.Log) == 0 {
		return bson.Timestamp{}
	}
	t, i := s.Log[len(s.Log)-1].Lookup("ts").Timestamp()
	return bson.Timestamp{T: t, I: i}
}

// Chunk width and count of the shard-key range table: chunk c holds sk in
// [c*chunkWidth, (c+1)*chunkWidth).
const (
	chunkWidth = 10
	chunkCount = 6
)

// Model is a sharded cluster with one sharded collection (NS, shard key
// {sk: 1}).
type Model struct {
	NS     string
	Shards []*Shard
	// Docs is the collection as mongos shows it; Writes every user write.
	Docs   map[int64]Doc
	Writes map[WriteKey]Write
	// ReadAt is the cluster time of a read of the source once the
	// schedule is written (Lookup); every live shard logs past it
	// (Finish).
	ReadAt bson.Timestamp
	// Counts of what the schedule did, for messages.
	Migrations, Aborted, KeyChanges, Txns, DDL int
	// Fired counts, by behaviour name, the events only that behaviour
	// makes (Behaviours; see Fired in behaviours.go).
	Fired map[string]int

	rng    *rand.Rand
	seed   uint64
	clock  uint32
	owner  [chunkCount]*Shard
	seq    map[int64]int
	nextID int64
	txn    int64
	// held are, per shard, ids of orphan copies left by migrations out of
	// it, waiting for the range deleter.
	orphans map[*Shard][]orphans
	ui      bson.Binary

	// B are the behaviours the model has (behaviours.go).
	B Behaviours
	// wall is the cluster's wall second past epoch (Clocks); routers are
	// the cluster times of the routers the application writes through,
	// lastWrite each document's last write ts.
	wall       uint32
	routers    [2]bson.Timestamp
	routerNext int
	lastWrite  map[int64]bson.Timestamp
	// unrelated marks the write being logged as one no cluster time
	// reaches but its shard's own (InsertIDUnrelated); lastTS is the ts
	// of the last user write recorded.
	unrelated bool
	lastTS    bson.Timestamp
	// sessions are the retryable-write sessions (Sessions) and, per
	// shard, each session's last write there (config.transactions).
	sessions []*session
	sessLast map[*Shard]map[string]sessWrite
	uuids    int
}

// orphans are a range's documents a shard keeps until its range deleter
// runs: their _ids and, with ConfigDocs, the range-deletion task.
type orphans struct {
	ids  []int64
	task *rangeTask
}

// NewModel returns a cluster of shards named s0, s1, ... with the chunks
// dealt over the shards that are not idle.
func NewModel(seed uint64, ns string, shards int, idle bool) *Model {
	m := &Model{NS: ns, seed: seed, Fired: map[string]int{}, Docs: map[int64]Doc{}, Writes: map[WriteKey]Write{}, seq: map[int64]int{},
		rng: rand.New(rand.NewPCG(seed, 0x5ead)), orphans: map[*Shard][]orphans{}, nextID: 1,
		lastWrite: map[int64]bson.Timestamp{}, sessLast: map[*Shard]map[string]sessWrite{},
		ui: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}}
	for i := range shards {
		m.Shards = append(m.Shards, &Shard{Name: fmt.Sprintf("s%d", i), Idle: idle && i == shards-1})
	}
	active := m.active()
	for c := range m.owner {
		m.owner[c] = active[c%len(active)]
	}
	return m
}

// tick returns the next cluster time.
func (m *Model) tick() bson.Timestamp {
	m.clock++
	return bson.Timestamp{T: 1_700_000_000 + m.clock/16, I: m.clock%16 + 1}
}

// active returns the shards that take chunks.
func (m *Model) active() []*Shard {
	var out []*Shard
	for _, s := range m.Shards {
		if !s.Idle && !s.Removed {
			out = append(out, s)
		}
	}
	return out
}

// Shard returns the shard named name.
func (m *Model) Shard(name string) *Shard {
	for _, s := range m.Shards {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (m *Model) log(s *Shard, ts bson.Timestamp, e bson.D) {
	e = append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "v", Value: int64(2)}}, e...)
	e = append(e, bson.E{Key: "wall", Value: time.Unix(int64(ts.T), int64(ts.I)*1e6).UTC()})
	b, err := bson.Marshal(e)
	if err != nil {
		panic(err)
	}
	s.Log = append(s.Log, b)
}

func (m *Model) crud(op string, o, o2 bson.D, fromMigrate bool) bson.D {
	e := bson.D{{Key: "op", Value: op}, {Key: "ns", Value: m.NS}, {Key: "ui", Value: m.ui}, {Key: "o", Value: o}}
	if o2 != nil {
		e = append(e, bson.E{Key: "o2", Value: o2})
	}
	if fromMigrate {
		e = append(e, bson.E{Key: "fromMigrate", Value: true})
	}
	return e
}

func (m *Model) record(s *Shard, ts bson.Timestamp, id int64, kind byte, seq int) {
	k := WriteKey{Shard: s.Name, TS: ts, ID: id}
	m.Writes[k] = Write{WriteKey: k, Seq: seq, Kind: kind}
	m.lastTS = ts
}

func (m *Model) nextSeq(id int64) int {
	m.seq[id]++
	return m.seq[id]
}

// Noop logs a periodic no-op on s.
func (m *Model) Noop(s *Shard) { m.logNoop(s) }

// Insert inserts a new document with shard key sk on the shard owning it.
func (m *Model) Insert(sk int64) Doc {
	d := m.InsertID(m.nextID, sk)
	m.nextID++
	return d
}

// InsertID inserts document id (absent now) with shard key sk on the
// shard owning it.
func (m *Model) InsertID(id, sk int64) Doc {
	d := Doc{ID: id, SK: sk, V: int64(m.seq[id] + 1)}
	s := m.owner[sk/chunkWidth]
	m.userWrite(s, id, m.crud("i", d.raw(), m.insertKey(d), false), 'i')
	m.Docs[d.ID] = d
	return d
}

// InsertIDUnrelated is InsertID from a client that carries no cluster
// time of the document's earlier writes, through a router that has not
// seen them: another process of the application, told of a delete by
// its own messages, not by MongoDB. Only a message that carries a
// cluster time orders two shards' ts (VectorClock::gossipIn,
// db/vector_clock.cpp; a driver sends the highest $clusterTime its own
// client has seen), so the insert's ts is its shard's clock alone and may
// lie below the delete's on the other shard.
func (m *Model) InsertIDUnrelated(id, sk int64) Doc {
	m.unrelated = true
	defer func() { m.unrelated = false }()
	return m.InsertID(id, sk)
}

// userWrite logs a user's write of document id on s, routed (Clocks) and,
// with Sessions, retryable in half the cases.
func (m *Model) userWrite(s *Shard, id int64, e bson.D, kind byte) bson.Timestamp {
	m.route(s, id)
	ts := m.at(s)
	var ss *session
	if m.B.Sessions && m.rng.IntN(2) == 0 {
		e, ss = m.retryable(e)
	}
	m.log(s, ts, e)
	if ss != nil {
		m.wroteRetryable(s, ss, m.skOf(id, e))
	}
	m.routed(id, ts)
	m.record(s, ts, id, kind, m.nextSeq(id))
	return ts
}

// skOf returns the shard key of document id as entry e writes it.
func (m *Model) skOf(id int64, e bson.D) int64 {
	for _, f := range e {
		if f.Key == "o2" || f.Key == "o" && f.Value.(bson.D)[0].Key == "sk" {
			return f.Value.(bson.D)[0].Value.(int64)
		}
	}
	for _, f := range e {
		if f.Key == "op" && f.Value == "i" {
			// An insert without o2 (a binary before 5.3): its document.
			for _, g := range e {
				if g.Key == "o" {
					return decodeD(g.Value.(bson.D)).SK
				}
			}
		}
	}
	return m.Docs[id].SK
}

// diff returns an update of fields: a $v:2 diff, or on 4.4 $v:1 $set.
func (m *Model) diff(fields bson.D) bson.D {
	if m.B.Version == 44 {
		return bson.D{{Key: "$v", Value: int32(1)}, {Key: "$set", Value: fields}}
	}
	return bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: fields}}}}
}

// Update sets a new version of document id on its shard, as a $v:2 diff.
func (m *Model) Update(id int64) {
	d := m.Docs[id]
	d.V++
	s := m.owner[d.SK/chunkWidth]
	m.userWrite(s, id, m.crud("u", m.diff(bson.D{{Key: "v", Value: d.V}}), d.key(), false), 'u')
	m.Docs[id] = d
}

// Delete deletes document id on its shard.
func (m *Model) Delete(id int64) {
	d := m.Docs[id]
	s := m.owner[d.SK/chunkWidth]
	m.userWrite(s, id, m.crud("d", d.key(), nil, false), 'd')
	delete(m.Docs, id)
}

// inChunk returns the ids of the documents in chunk c, in order.
func (m *Model) inChunk(c int) []int64 {
	var ids []int64
	for id, d := range m.Docs {
		if int(d.SK/chunkWidth) == c {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Owner returns the shard owning chunk c.
func (m *Model) Owner(c int) *Shard { return m.owner[c] }

// Migrate moves chunk c to shard to: the recipient logs fromMigrate copies
// of its documents; catchUp user writes on the donor follow, each mirrored
// on the recipient by a fromMigrate write after it; then the migration
// commits (the donor's range deletion is logged later, see RangeDelete)
// or, with abort, the recipient deletes its copies with fromMigrate
// deletes.
func (m *Model) Migrate(c int, to *Shard, catchUp int, abort bool) {
	from := m.owner[c]
	if from == to {
		return
	}
	if m.B.ConfigDocs || m.B.RecordIDClone || m.B.Sessions || m.B.Clocks {
		m.migrate(c, to, catchUp, abort)
		return
	}
	m.RangeDelete(to) // a shard receives a range only once its orphans are gone
	copied := map[int64]bool{}
	for _, id := range m.inChunk(c) {
		d := m.Docs[id]
		m.log(to, m.tick(), m.crud("i", d.raw(), nil, true))
		copied[id] = true
	}
	for range catchUp {
		ids := m.inChunk(c)
		switch p := m.rng.IntN(3); {
		case p == 0 || len(ids) == 0:
			d := m.Insert(int64(c*chunkWidth + m.rng.IntN(chunkWidth)))
			m.log(to, m.tick(), m.crud("i", d.raw(), nil, true))
			copied[d.ID] = true
		case p == 1:
			id := ids[m.rng.IntN(len(ids))]
			m.Update(id)
			d := m.Docs[id]
			m.log(to, m.tick(), m.crud("u", d.raw(), bson.D{{Key: "_id", Value: id}}, true))
		default:
			id := ids[m.rng.IntN(len(ids))]
			m.Delete(id)
			m.log(to, m.tick(), m.crud("d", bson.D{{Key: "_id", Value: id}}, nil, true))
			delete(copied, id)
		}
	}
	m.Migrations++
	if abort {
		m.Aborted++
		for _, id := range sortedIDs(copied) {
			m.log(to, m.tick(), m.crud("d", bson.D{{Key: "_id", Value: id}}, nil, true))
		}
		return
	}
	m.owner[c] = to
	m.orphans[from] = append(m.orphans[from], orphans{ids: m.inChunk(c)})
}

func idsOf(ws []Write) []int64 {
	out := make([]int64, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func sortedIDs(set map[int64]bool) []int64 {
	var ids []int64
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// RangeDelete logs the range deleter's fromMigrate deletes of s's orphan
// copies.
// With ConfigDocs, each range's task is updated and deleted around its
// deletes (range_deletion_util.cpp).
func (m *Model) RangeDelete(s *Shard) {
	for _, o := range m.orphans[s] {
		if o.task != nil {
			m.taskProcessing(s, o.task)
		}
		for _, id := range o.ids {
			m.log(s, m.at(s), m.crud("d", bson.D{{Key: "_id", Value: id}}, nil, true))
		}
		if o.task != nil {
			m.taskDone(s, o.task, len(o.ids))
		}
	}
	delete(m.orphans, s)
}

func (m *Model) session() (bson.D, int64) {
	m.txn++
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte(fmt.Sprintf("session%09d", m.txn))}}, {Key: "uid", Value: bson.Binary{Subtype: 0, Data: make([]byte, 32)}}}
	return lsid, m.txn
}

// part is one shard's operations of a transaction.
type part struct {
	shard *Shard
	ops   []bson.D
	// writes are recorded at the commit entry's ts.
	writes []Write
	// undo are the documents before the part (nil: absent), restored if
	// the transaction aborts (Parts).
	undo map[int64]*Doc
}

func (m *Model) inner(op string, o, o2 bson.D) bson.D {
	e := bson.D{{Key: "op", Value: op}, {Key: "ns", Value: m.NS}, {Key: "ui", Value: m.ui}, {Key: "o", Value: o}}
	if o2 != nil {
		e = append(e, bson.E{Key: "o2", Value: o2})
	}
	return e
}

// ChangeKey moves document id to shard key sk, owned by another shard:
// a delete on its shard and an insert on the new one, in one prepared
// transaction. between, if set, runs between the prepares and the
// commits. It reports false when sk's chunk has the same owner.
func (m *Model) ChangeKey(id, sk int64, between func()) bool {
	d := m.Docs[id]
	from, to := m.owner[d.SK/chunkWidth], m.owner[sk/chunkWidth]
	if from == to {
		return false
	}
	m.RangeDelete(to)
	nd := Doc{ID: id, SK: sk, V: d.V + 1}
	seq := m.nextSeq(id)
	del := &part{shard: from, ops: []bson.D{m.inner("d", d.key(), nil)}, writes: []Write{{WriteKey: WriteKey{ID: id}, Seq: seq, Kind: 'd'}}}
	ins := &part{shard: to, ops: []bson.D{m.inner("i", nd.raw(), m.insertKey(nd))}, writes: []Write{{WriteKey: WriteKey{ID: id}, Seq: seq, Kind: 'i'}}}
	// The model's documents change as of the decision, right after
	// between: a late commit's client writes see the new document.
	m.prepared([]*part{del, ins}, func() {
		if between != nil {
			between()
		}
		m.Docs[id] = nd
	})
	m.KeyChanges++
	return true
}

// ChangeKeyInPlace sets document id's shard key to sk where its shard
// owns sk's chunk too: one update entry on that shard, a $v:2 diff with
// o2 the old document key.
func (m *Model) ChangeKeyInPlace(id, sk int64) {
	d := m.Docs[id]
	s := m.owner[d.SK/chunkWidth]
	nd := Doc{ID: id, SK: sk, V: d.V + 1}
	m.userWrite(s, id, m.crud("u", m.diff(bson.D{{Key: "sk", Value: nd.SK}, {Key: "v", Value: nd.V}}), d.key(), false), 'u')
	m.Docs[id] = nd
	m.KeyChanges++
}

// docOn picks a document owned by s.
func (m *Model) docOn(s *Shard) (int64, bool) {
	var ids []int64
	for c := range m.owner {
		if m.owner[c] == s {
			ids = append(ids, m.inChunk(c)...)
		}
	}
	if len(ids) == 0 {
		return 0, false
	}
	slices.Sort(ids)
	return ids[m.rng.IntN(len(ids))], true
}

// chunkOf picks a chunk owned by s.
func (m *Model) chunkOf(s *Shard) (int, bool) {
	var cs []int
	for c := range m.owner {
		if m.owner[c] == s {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return 0, false
	}
	return cs[m.rng.IntN(len(cs))], true
}

// AddShard adds an empty shard that takes chunks from now on.
func (m *Model) AddShard() *Shard {
	added := m.tick()
	if m.B.Clocks {
		added = bson.Timestamp{T: epoch + m.wall, I: 1}
	}
	s := &Shard{Name: fmt.Sprintf("s%d", len(m.Shards)), Added: added}
	s.hlc = added
	m.Shards = append(m.Shards, s)
	return s
}

// RemoveShard drains s (its chunks migrate to the other active shards,
// its orphans are deleted), logs its last no-op (with Clocks, 10 s pass
// and the idle shards write theirs) and removes it.
func (m *Model) RemoveShard(s *Shard) {
	others := slices.DeleteFunc(m.active(), func(o *Shard) bool { return o == s })
	if len(others) == 0 {
		return
	}
	for c := range m.owner {
		if m.owner[c] == s {
			m.Migrate(c, others[m.rng.IntN(len(others))], m.rng.IntN(2), false)
		}
	}
	m.RangeDelete(s)
	if m.B.Clocks {
		m.Elapse(noopInterval) // the removal takes a while: idle shards write their no-ops
	} else {
		m.Noop(s)
	}
	s.Removed = true
}

// Finish deletes every orphan and logs a last no-op on every shard that
// is not removed, so every subtask reads past every other shard's
// entries.
func (m *Model) Finish() {
	for _, s := range m.Shards {
		m.RangeDelete(s)
	}
	if m.B.Clocks {
		m.Elapse(noopInterval + 1)
	} else {
		for _, s := range m.Shards {
			if !s.Removed {
				m.Noop(s)
			}
		}
	}
	m.readAfter()
}

// readAfter models a replayer's read of the source through mongos once
// the schedule is written (Lookup): it answers with the highest cluster
// time of the cluster, ReadAt, and carries it to every shard it asks
// (VectorClock::gossipIn), whose periodic no-op writer then logs an entry
// past it (condition 4 of docs/sharded.md: every shard keeps logging).
func (m *Model) readAfter() {
	for _, s := range m.Shards {
		if l := s.Last(); l.After(m.ReadAt) {
			m.ReadAt = l
		}
	}
	if m.B.Clocks {
		for _, s := range m.Shards {
			m.see(s, m.ReadAt)
		}
		m.Elapse(noopInterval + 1)
		return
	}
	for _, s := range m.Shards {
		if !s.Removed {
			m.Noop(s)
		}
	}
}

// Topology logs the no-op a sharding operation leaves on each of shards
// (each at its own time): o2's first field names the operation and its
// namespace, a database for movePrimary, as the server logs them for
// change streams (s/resharding, s/shard_key_util.cpp, s/move_primary). It
// returns each shard's entry ts.
func (m *Model) Topology(op, ns string, shards []*Shard) map[string]bson.Timestamp {
	at := map[string]bson.Timestamp{}
	for _, s := range shards {
		ts := m.at(s)
		m.log(s, ts, bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ns},
			{Key: "o", Value: bson.D{{Key: "msg", Value: bson.D{{Key: op, Value: ns}}}}},
			{Key: "o2", Value: bson.D{{Key: op, Value: ns}, {Key: "shardKey", Value: bson.D{{Key: "sk", Value: 1}}}}}})
		at[s.Name] = ts
	}
	m.DDL++
	return at
}

// listed returns the shards not removed.
func (m *Model) listed() []*Shard {
	var out []*Shard
	for _, s := range m.Shards {
		if !s.Removed {
			out = append(out, s)
		}
	}
	return out
}

// ReshardCommit logs what a resharding's commit leaves on a recipient
// that was no donor (no reshardBegin of its own): the rename of its
// temporary collection over the original, on each of shards.
func (m *Model) ReshardCommit(shards []*Shard) map[string]bson.Timestamp {
	db, _, _ := strings.Cut(m.NS, ".")
	at := map[string]bson.Timestamp{}
	for _, s := range shards {
		ts := m.at(s)
		m.log(s, ts, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: db + ".$cmd"},
			{Key: "o", Value: bson.D{{Key: "renameCollection", Value: db + ".system.resharding.6f1c2a3b-0000-4000-8000-000000000001"},
				{Key: "to", Value: m.NS}, {Key: "stayTemp", Value: false}, {Key: "dropTarget", Value: true}}}})
		at[s.Name] = ts
	}
	m.DDL++
	return at
}
