package shardsim

import (
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Txn is a multi-shard transaction as its coordinator runs it
// (s/transaction_coordinator.cpp, transaction_coordinator_util.cpp): with
// Behaviours.Coordinator the coordinator shard (the first participant)
// inserts config.transaction_coordinators {_id: {lsid, txnNumber},
// participants} before the prepares, replaces it with the decision
// ({decision: "commit", commitTimestamp} or {decision: "abort",
// abortStatus}) once every participant voted, and deletes it after the
// commits or aborts. The commitTimestamp is the largest prepare ts
// (txn::PrepareVoteConsensus); every message carries the cluster time.
type Txn struct {
	m        *Model
	lsid     bson.D
	n        int64
	parts    []*part
	coord    *Shard
	prep     map[*Shard]bson.Timestamp
	CommitTS bson.Timestamp
	decided  bool
	// acked is the cluster time a client that learnt of the commit
	// carries at the least: the coordinator's clock once the decision is
	// durable (the reply at the decision on 5.0 to 6.0; a reader of a
	// committed participant brings that participant's commit ts, later).
	acked bson.Timestamp
}

// NewTxn starts a transaction of parts, the first one's shard its
// coordinator.
func (m *Model) NewTxn(parts []*part) *Txn {
	lsid, n := m.session()
	t := &Txn{m: m, lsid: lsid, n: n, parts: parts, coord: parts[0].shard, prep: map[*Shard]bson.Timestamp{}}
	if m.B.Coordinator {
		m.see(t.coord, m.routers[m.rng.IntN(len(m.routers))])
		m.log(t.coord, m.at(t.coord), m.cfgCRUD("i", nsCoordinators, t.coordDoc(nil), nil))
	}
	return t
}

func (t *Txn) id() bson.D {
	return bson.D{{Key: "lsid", Value: t.lsid}, {Key: "txnNumber", Value: t.n}}
}

func (t *Txn) coordDoc(decision bson.D) bson.D {
	var names bson.A
	for _, p := range t.parts {
		names = append(names, p.shard.Name)
	}
	d := bson.D{{Key: "_id", Value: t.id()}, {Key: "participants", Value: names}}
	if decision != nil {
		d = append(d, bson.E{Key: "decision", Value: decision})
	}
	return d
}

func (t *Txn) part(s *Shard) *part {
	for _, p := range t.parts {
		if p.shard == s {
			return p
		}
	}
	panic("shardsim: " + s.Name + " is no participant")
}

// Prepare logs the prepare applyOps of s's part, at s's next ts.
func (t *Txn) Prepare(s *Shard) bson.Timestamp {
	m, p := t.m, t.part(s)
	m.gossip(t.coord, s)
	ts := m.at(s)
	m.log(s, ts, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "applyOps", Value: p.ops}, {Key: "prepare", Value: true}}},
		{Key: "lsid", Value: t.lsid}, {Key: "txnNumber", Value: t.n},
		{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}})
	t.prep[s] = ts
	m.gossip(s, t.coord) // the vote carries the prepare ts
	return ts
}

// Decide makes the coordinator's decision durable: commit at the largest
// prepare ts, or abort.
func (t *Txn) Decide(commit bool) {
	m := t.m
	t.decided = true
	var decision bson.D
	if commit {
		for _, ts := range t.prep {
			if ts.After(t.CommitTS) {
				t.CommitTS = ts
			}
		}
		if !m.B.Coordinator && !m.B.Clocks {
			t.CommitTS = m.tick()
		}
		decision = bson.D{{Key: "decision", Value: "commit"}, {Key: "commitTimestamp", Value: t.CommitTS}}
	} else {
		for _, p := range t.parts {
			for id, d := range p.undo {
				if d == nil {
					delete(m.Docs, id)
				} else {
					m.Docs[id] = *d
				}
			}
		}
		decision = bson.D{{Key: "decision", Value: "abort"}, {Key: "abortStatus", Value: bson.D{
			{Key: "code", Value: int32(251)}, {Key: "codeName", Value: "NoSuchTransaction"}, {Key: "errmsg", Value: "Transaction was aborted"}}}}
	}
	if m.B.Coordinator {
		m.log(t.coord, m.at(t.coord), m.cfgCRUD("u", nsCoordinators, t.coordDoc(decision), bson.D{{Key: "_id", Value: t.id()}}))
	}
	t.acked = t.coord.hlc
}

// Commit logs commitTransaction on s and records its writes there.
func (t *Txn) Commit(s *Shard) bson.Timestamp {
	m, p := t.m, t.part(s)
	if !t.decided {
		t.Decide(true)
	}
	m.gossip(t.coord, s)
	ts := m.at(s)
	m.log(s, ts, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: t.CommitTS}}},
		{Key: "lsid", Value: t.lsid}, {Key: "txnNumber", Value: t.n},
		{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: t.prep[s]}, {Key: "t", Value: int64(1)}}}})
	var ids []int64
	for _, w := range p.writes {
		m.record(s, ts, w.ID, w.Kind, w.Seq)
		ids = append(ids, w.ID)
		if ts.After(m.lastWrite[w.ID]) {
			m.lastWrite[w.ID] = ts
		}
	}
	m.txnWritten(s, t.lsid, t.n, ts, ids)
	return ts
}

// Abort logs abortTransaction on s if its part was prepared (an
// unprepared part logs nothing).
func (t *Txn) Abort(s *Shard) {
	m := t.m
	if !t.decided {
		t.Decide(false)
	}
	prep, ok := t.prep[s]
	if !ok {
		return
	}
	m.gossip(t.coord, s)
	m.log(s, m.at(s), bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "abortTransaction", Value: int32(1)}}},
		{Key: "lsid", Value: t.lsid}, {Key: "txnNumber", Value: t.n},
		{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prep}, {Key: "t", Value: int64(1)}}}})
}

// End deletes the coordinator's document.
func (t *Txn) End() {
	if t.m.B.Coordinator {
		t.m.log(t.coord, t.m.at(t.coord), t.m.cfgCRUD("d", nsCoordinators, bson.D{{Key: "_id", Value: t.id()}}, nil))
	}
}

// coordinated runs parts as one transaction: prepares in a random order,
// between (if set), then commits in a random order; with mayAbort and
// Coordinator, one in six is aborted after a random number of prepares.
// It reports whether the transaction committed.
func (m *Model) coordinated(parts []*part, between func(), mayAbort bool) bool {
	t := m.NewTxn(parts)
	order := slices.Clone(parts)
	m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if mayAbort && m.B.Coordinator && m.rng.IntN(6) == 0 {
		for _, p := range order[:m.rng.IntN(len(order)+1)] {
			t.Prepare(p.shard)
		}
		if between != nil {
			between()
		}
		for _, p := range order {
			t.Abort(p.shard)
		}
		t.End()
		m.Fired["Coordinator"]++
		return false
	}
	for _, p := range order {
		t.Prepare(p.shard)
	}
	if between != nil {
		between()
	}
	m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	late := len(order)
	if m.B.LateCommit && len(order) > 1 && m.rng.IntN(2) == 0 {
		late = 1 + m.rng.IntN(len(order)-1)
	}
	for _, p := range order[:late] {
		t.Commit(p.shard)
	}
	if late < len(order) {
		m.afterDecision(t, order[:late], order[late:])
		m.Fired["LateCommit"]++
	}
	for _, p := range order[late:] {
		t.Commit(p.shard)
	}
	t.End()
	m.Txns++
	return true
}

// afterDecision is a client that learnt of t's commit (its reply at the
// decision, or a read of a committed participant) writing again before
// the commits of the pending parts reach their shards: each document a
// committed part inserted or updated, and that still lives on that
// part's shard, is updated there or, with even odds, moved to a shard
// where no part is pending (a delete, then an insert of its _id with a
// shard key that shard owns). A pending shard keeps its prepared
// documents locked, so nothing is written there.
func (m *Model) afterDecision(t *Txn, committed, pending []*part) {
	for _, p := range committed {
		for _, w := range p.writes {
			d, ok := m.Docs[w.ID]
			if w.Kind == 'd' || !ok || m.owner[d.SK/chunkWidth] != p.shard {
				continue
			}
			if t.acked.After(m.lastWrite[w.ID]) {
				m.lastWrite[w.ID] = t.acked // the cluster time such a client brings
			}
			var to []int
			for c, s := range m.owner {
				if s != p.shard && !m.holdsOrphan(s, w.ID) && !slices.ContainsFunc(pending, func(q *part) bool { return q.shard == s }) {
					to = append(to, c)
				}
			}
			if len(to) == 0 || m.rng.IntN(2) == 0 {
				m.Update(w.ID)
				continue
			}
			c := to[m.rng.IntN(len(to))]
			m.Delete(w.ID)
			m.InsertID(w.ID, int64(c*chunkWidth+m.rng.IntN(chunkWidth)))
		}
	}
}

// TxnWrite is one write of a transaction built by Parts.
type TxnWrite struct {
	// Kind is 'i' (insert ID with shard key SK), 'u' (a new version of
	// ID) or 'd' (delete ID).
	Kind byte
	ID   int64
	SK   int64
}

// Parts builds the per-shard parts of a transaction of ws (each on the
// shard owning its document's chunk now) and applies them to the model's
// documents as of the commit (an abort restores them).
func (m *Model) Parts(ws ...TxnWrite) []*part {
	var parts []*part
	get := func(s *Shard) *part {
		for _, p := range parts {
			if p.shard == s {
				return p
			}
		}
		p := &part{shard: s, undo: map[int64]*Doc{}}
		parts = append(parts, p)
		return p
	}
	keep := func(p *part, id int64) {
		if _, ok := p.undo[id]; ok {
			return
		}
		if d, ok := m.Docs[id]; ok {
			p.undo[id] = &d
		} else {
			p.undo[id] = nil
		}
	}
	for _, w := range ws {
		switch w.Kind {
		case 'i':
			d := Doc{ID: w.ID, SK: w.SK, V: int64(m.seq[w.ID] + 1)}
			p := get(m.owner[w.SK/chunkWidth])
			keep(p, d.ID)
			p.ops = append(p.ops, m.inner("i", d.raw(), m.insertKey(d)))
			p.writes = append(p.writes, Write{WriteKey: WriteKey{ID: d.ID}, Seq: m.nextSeq(d.ID), Kind: 'i'})
			m.Docs[d.ID] = d
		case 'u':
			d := m.Docs[w.ID]
			d.V++
			p := get(m.owner[d.SK/chunkWidth])
			keep(p, d.ID)
			p.ops = append(p.ops, m.inner("u", m.diff(bson.D{{Key: "v", Value: d.V}}), d.key()))
			p.writes = append(p.writes, Write{WriteKey: WriteKey{ID: d.ID}, Seq: m.nextSeq(d.ID), Kind: 'u'})
			m.Docs[d.ID] = d
		case 'd':
			d := m.Docs[w.ID]
			p := get(m.owner[d.SK/chunkWidth])
			keep(p, d.ID)
			p.ops = append(p.ops, m.inner("d", d.key(), nil))
			p.writes = append(p.writes, Write{WriteKey: WriteKey{ID: d.ID}, Seq: m.nextSeq(d.ID), Kind: 'd'})
			delete(m.Docs, d.ID)
		}
	}
	return parts
}

// prepared logs a multi-shard transaction: a prepare applyOps on each
// shard, then (after between, if set) commitTransaction entries with one
// commitTimestamp, in a random order of shards.
func (m *Model) prepared(parts []*part, between func()) {
	if m.B.Clocks || m.B.Coordinator {
		m.coordinated(parts, between, false)
		return
	}
	lsid, n := m.session()
	m.rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	prep := make([]bson.Timestamp, len(parts))
	for i, p := range parts {
		prep[i] = m.tick()
		m.log(p.shard, prep[i], bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "applyOps", Value: p.ops}, {Key: "prepare", Value: true}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: n},
			{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}})
	}
	if between != nil {
		between()
	}
	cts := m.tick()
	m.rng.Shuffle(len(parts), func(i, j int) {
		parts[i], parts[j] = parts[j], parts[i]
		prep[i], prep[j] = prep[j], prep[i]
	})
	for i, p := range parts {
		ts := m.tick()
		m.log(p.shard, ts, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
			{Key: "o", Value: bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: cts}}},
			{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: n},
			{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prep[i]}, {Key: "t", Value: int64(1)}}}})
		for _, w := range p.writes {
			m.record(p.shard, ts, w.ID, w.Kind, w.Seq)
		}
	}
	m.Txns++
}

// MultiShardTxn updates one document and inserts one on each of two
// shards, in one prepared transaction.
func (m *Model) MultiShardTxn(a, b *Shard) {
	var parts []*part
	before := map[int64]Doc{}
	for _, s := range []*Shard{a, b} {
		p := &part{shard: s}
		if id, ok := m.docOn(s); ok {
			d := m.Docs[id]
			before[id] = d
			d.V++
			p.ops = append(p.ops, m.inner("u", bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "v", Value: d.V}}}}}}, d.key()))
			p.writes = append(p.writes, Write{WriteKey: WriteKey{ID: id}, Seq: m.nextSeq(id), Kind: 'u'})
			m.Docs[id] = d
		}
		if c, ok := m.chunkOf(s); ok {
			d := Doc{ID: m.nextID, SK: int64(c*chunkWidth + m.rng.IntN(chunkWidth)), V: 1}
			m.nextID++
			p.ops = append(p.ops, m.inner("i", d.raw(), m.insertKey(d)))
			p.writes = append(p.writes, Write{WriteKey: WriteKey{ID: d.ID}, Seq: m.nextSeq(d.ID), Kind: 'i'})
			m.Docs[d.ID] = d
		}
		if len(p.ops) > 0 {
			parts = append(parts, p)
		}
	}
	switch {
	case len(parts) == 0:
	case m.B.Clocks || m.B.Coordinator:
		if !m.coordinated(parts, nil, true) {
			for _, p := range parts {
				for _, w := range p.writes {
					if d, ok := before[w.ID]; ok {
						m.Docs[w.ID] = d
					} else {
						delete(m.Docs, w.ID)
					}
				}
			}
		}
	default:
		m.prepared(parts, nil)
	}
}

// ShardTxn is a one-shard transaction: one applyOps entry that inserts a
// document and updates another.
func (m *Model) ShardTxn(s *Shard) {
	c, ok := m.chunkOf(s)
	if !ok {
		return
	}
	lsid, n := m.session()
	var ops []bson.D
	var ws []Write
	d := Doc{ID: m.nextID, SK: int64(c*chunkWidth + m.rng.IntN(chunkWidth)), V: 1}
	m.nextID++
	ops = append(ops, m.inner("i", d.raw(), m.insertKey(d)))
	ws = append(ws, Write{WriteKey: WriteKey{ID: d.ID}, Seq: m.nextSeq(d.ID), Kind: 'i'})
	m.Docs[d.ID] = d
	if id, ok := m.docOn(s); ok && id != d.ID {
		u := m.Docs[id]
		u.V++
		ops = append(ops, m.inner("u", bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "v", Value: u.V}}}}}}, u.key()))
		ws = append(ws, Write{WriteKey: WriteKey{ID: id}, Seq: m.nextSeq(id), Kind: 'u'})
		m.Docs[id] = u
	}
	m.route(s, d.ID)
	ts := m.at(s)
	m.routed(d.ID, ts)
	m.txnWritten(s, lsid, n, ts, idsOf(ws))
	m.log(s, ts, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "applyOps", Value: ops}}},
		{Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: n},
		{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}})
	for _, w := range ws {
		m.record(s, ts, w.ID, w.Kind, w.Seq)
	}
	m.Txns++
}
