package shardsim

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// session is a retryable-write session of the application
// (Behaviours.Sessions): its lsid and last txnNumber.
type session struct {
	lsid bson.D
	txn  int64
}

// sessWrite is a session's last write on a shard, as its
// config.transactions record points to it: the entry (for a retryable
// write; the innermost original for one migrated in) or a transaction.
type sessWrite struct {
	lsid  bson.D
	n     int64
	ts    bson.Timestamp
	entry bson.Raw
	txn   bool
	sk    []int64
}

// sessionCount is the number of retryable-write sessions.
const sessionCount = 4

func sessKey(lsid bson.D) string { return fmt.Sprint(lsid[0].Value) }

// retryable makes e a retryable write of a session (the next txnNumber,
// statement 0) and returns the session.
func (m *Model) retryable(e bson.D) (bson.D, *session) {
	if len(m.sessions) < sessionCount {
		lsid, _ := m.session()
		m.sessions = append(m.sessions, &session{lsid: lsid})
	}
	ss := m.sessions[m.rng.IntN(len(m.sessions))]
	ss.txn++
	return append(e, bson.E{Key: "lsid", Value: ss.lsid}, bson.E{Key: "txnNumber", Value: ss.txn},
		bson.E{Key: "stmtId", Value: int32(0)},
		bson.E{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}), ss
}

func (m *Model) lastOn(s *Shard) map[string]sessWrite {
	if m.sessLast[s] == nil {
		m.sessLast[s] = map[string]sessWrite{}
	}
	return m.sessLast[s]
}

// wroteRetryable records ss's write of the shard key sk, s's last entry.
func (m *Model) wroteRetryable(s *Shard, ss *session, sk int64) {
	m.lastOn(s)[sessKey(ss.lsid)] = sessWrite{lsid: ss.lsid, n: ss.txn, ts: s.Last(), entry: s.Log[len(s.Log)-1], sk: []int64{sk}}
}

// txnWritten records a committed transaction of lsid on s.
func (m *Model) txnWritten(s *Shard, lsid bson.D, n int64, ts bson.Timestamp, ids []int64) {
	if !m.B.Sessions {
		return
	}
	w := sessWrite{lsid: lsid, n: n, ts: ts, txn: true}
	for _, id := range ids {
		if d, ok := m.Docs[id]; ok {
			w.sk = append(w.sk, d.SK)
		}
	}
	m.lastOn(s)[sessKey(lsid)] = w
}

// migrateSessions logs on to what SessionCatalogMigrationDestination
// writes for the sessions whose last write on from is in chunk c
// (s/session_catalog_migration_source.cpp, _destination.cpp): only that
// write (a session that wrote again since has moved on, and its earlier
// writes are not migrated), as an op n no-op with o {$sessionMigrateInfo:
// 1}, o2 the original entry, the session's lsid, txnNumber and stmtId,
// and fromMigrate; for a transaction, the dead-end sentinel (o2
// {$incompleteOplogHistory: 1}, stmtId -1). A session the recipient knows
// at a newer txnNumber is skipped (TransactionTooOld).
func (m *Model) migrateSessions(from, to *Shard, c int) {
	src := m.lastOn(from)
	keys := make([]string, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		w := src[k]
		in := false
		for _, sk := range w.sk {
			in = in || int(sk/chunkWidth) == c
		}
		if !in {
			continue
		}
		if old, ok := m.lastOn(to)[k]; ok && old.n >= w.n {
			continue
		}
		m.gossip(from, to)
		ts := m.at(to)
		e := bson.D{{Key: "op", Value: "n"}}
		if w.txn {
			e = append(e, bson.E{Key: "ns", Value: ""},
				bson.E{Key: "o", Value: bson.D{{Key: "$sessionMigrateInfo", Value: int32(1)}}},
				bson.E{Key: "o2", Value: bson.D{{Key: "$incompleteOplogHistory", Value: int32(1)}}},
				bson.E{Key: "lsid", Value: w.lsid}, bson.E{Key: "txnNumber", Value: w.n},
				bson.E{Key: "stmtId", Value: int32(-1)})
		} else {
			e = append(e, bson.E{Key: "ns", Value: m.NS}, bson.E{Key: "ui", Value: m.ui},
				bson.E{Key: "o", Value: bson.D{{Key: "$sessionMigrateInfo", Value: int32(1)}}},
				bson.E{Key: "o2", Value: w.entry},
				bson.E{Key: "lsid", Value: w.lsid}, bson.E{Key: "txnNumber", Value: w.n},
				bson.E{Key: "stmtId", Value: int32(0)})
		}
		e = append(e, bson.E{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}},
			bson.E{Key: "fromMigrate", Value: true})
		m.log(to, ts, e)
		m.Fired["Sessions"]++
		w.ts = ts
		m.lastOn(to)[k] = w
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
