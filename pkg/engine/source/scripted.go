package source

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Scripted is an OplogReader over entries given in advance: tests feed
// oplog shapes a test server cannot produce (updates with $v:2 diffs)
// through the same interface as the tailer, so only the read side is
// replaced.
type Scripted struct {
	mu      sync.Mutex
	entries []bson.Raw
	from    bson.Timestamp
	next    int
}

// NewScripted returns a reader of the entries with ts > from.
func NewScripted(from bson.Timestamp, entries ...bson.Raw) *Scripted {
	return &Scripted{entries: entries, from: from}
}

// Append adds entries at the end.
func (s *Scripted) Append(entries ...bson.Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, entries...)
}

// Next implements OplogReader.
func (s *Scripted) Next(ctx context.Context) ([]bson.Raw, error) {
	s.mu.Lock()
	var out []bson.Raw
	for ; s.next < len(s.entries); s.next++ {
		if tsOf(s.entries[s.next]).Compare(s.from) > 0 {
			out = append(out, s.entries[s.next])
		}
	}
	s.mu.Unlock()
	if len(out) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return out, nil
}

// Newest implements OplogReader: the ts of the last entry.
func (s *Scripted) Newest(context.Context) (bson.Timestamp, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.entries) == 0 {
		return s.from, nil
	}
	return tsOf(s.entries[len(s.entries)-1]), nil
}
