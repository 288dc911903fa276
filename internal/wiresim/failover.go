package wiresim

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MemOplog is an oplog held in memory that grows (Append): the history of
// one replica set member, for tests that change it as a deployment
// writes, fails over and rolls back.
type MemOplog struct {
	mu      sync.RWMutex
	entries []bson.Raw
}

// NewMemOplog returns an oplog holding entries, in ts order.
func NewMemOplog(entries ...bson.Raw) *MemOplog {
	return &MemOplog{entries: append([]bson.Raw(nil), entries...)}
}

// Append adds entries at the end; their ts must follow the last one's.
func (o *MemOplog) Append(entries ...bson.Raw) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = append(o.entries, entries...)
}

// Entries returns a copy of the entries.
func (o *MemOplog) Entries() []bson.Raw {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return append([]bson.Raw(nil), o.entries...)
}

func (o *MemOplog) at(k int64) bson.Raw {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.entries[k]
}

// Len implements Oplog.
func (o *MemOplog) Len() int64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return int64(len(o.entries))
}

// TS implements Oplog.
func (o *MemOplog) TS(k int64) bson.Timestamp {
	t, i, _ := o.at(k).Lookup("ts").TimestampOK()
	return bson.Timestamp{T: t, I: i}
}

// AppendEntry implements Oplog.
func (o *MemOplog) AppendEntry(dst []byte, k int64) []byte { return append(dst, o.at(k)...) }

// NS implements Oplog.
func (o *MemOplog) NS(k int64) string { s, _ := o.at(k).Lookup("ns").StringValueOK(); return s }

// Failover makes the server serve another member's oplog, all of it
// visible, as a client of a replica set sees a new primary: every open
// cursor is gone and every connection closed (a primary that steps down,
// and a member that rolls back, close their clients' connections; the
// driver connects again and finds the new primary at this address).
func (s *Server) Failover(o Oplog) {
	s.oplogMu.Lock()
	s.o.Oplog = o
	s.visible.Store(o.Len())
	s.oplogMu.Unlock()
	s.topoMu.Lock()
	s.topology.Add(1)
	if s.topoChanged != nil {
		close(s.topoChanged)
		s.topoChanged = nil
	}
	s.topoMu.Unlock()
	s.curMu.Lock()
	clear(s.cursors)
	s.curMu.Unlock()
	s.closeMu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.closeMu.Unlock()
	s.wake()
}

// topologyChanged returns a channel closed when Failover next changes the
// topology (an awaitable hello answers then, as mongod's does).
func (s *Server) topologyChanged() <-chan struct{} {
	s.topoMu.Lock()
	defer s.topoMu.Unlock()
	if s.topoChanged == nil {
		s.topoChanged = make(chan struct{})
	}
	return s.topoChanged
}
