package replaybench

import (
	"context"
	"encoding/binary"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DefaultReadBatch is how many entries Reader returns per Next: about what
// one getMore of a tailable cursor brings back.
const DefaultReadBatch = 1000

// Reader is a source.OplogReader that serves ops entries of an Input in
// batches: entry k is pool entry k mod len(pool), copied into the batch's
// own buffer (as a tailer copies what its cursor returns) with ts
// Input.TS(k). Once all are served, Next waits for its context to end, as
// a tailer of an idle source does.
type Reader struct {
	in    *Input
	ops   int64
	batch int

	mu   sync.Mutex
	next int64
}

// NewReader returns a reader of ops entries of in, in batches of batch
// (DefaultReadBatch when 0).
func NewReader(in *Input, ops int64, batch int) *Reader {
	if batch <= 0 {
		batch = DefaultReadBatch
	}
	return &Reader{in: in, ops: ops, batch: batch}
}

// Next implements source.OplogReader.
func (r *Reader) Next(ctx context.Context) ([]bson.Raw, error) {
	r.mu.Lock()
	first := r.next
	end := min(first+int64(r.batch), r.ops)
	r.next = end
	r.mu.Unlock()
	if first >= end {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	pool := int64(len(r.in.Entries))
	size := 0
	for k := first; k < end; k++ {
		size += len(r.in.Entries[k%pool])
	}
	buf := make([]byte, 0, size)
	out := make([]bson.Raw, 0, end-first)
	for k := first; k < end; k++ {
		i := k % pool
		start := len(buf)
		buf = append(buf, r.in.Entries[i]...)
		ts := r.in.TS(k)
		at := start + r.in.tsAt[i]
		// A BSON timestamp is the increment, then the seconds.
		binary.LittleEndian.PutUint32(buf[at:], ts.I)
		binary.LittleEndian.PutUint32(buf[at+4:], ts.T)
		out = append(out, bson.Raw(buf[start:len(buf):len(buf)]))
	}
	return out, nil
}

// Newest implements source.OplogReader: the last entry's position.
func (r *Reader) Newest(context.Context) (bson.Timestamp, error) {
	return r.in.TS(max(r.ops-1, 0)), nil
}
