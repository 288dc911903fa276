package pipeline

import (
	"context"
	"reflect"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Batch is a group of documents bound for one target namespace. Its bytes
// are charged to a Budget by whoever filled it and released by whoever
// wrote it.
type Batch struct {
	// Key identifies the unit of work the batch belongs to (a copy range).
	Key string
	// Docs are raw documents, owned by the batch.
	Docs []bson.Raw
	// Bytes is the sum of len(Docs[i]).
	Bytes int64
}

// Append adds a document (which the batch now owns).
func (b *Batch) Append(doc bson.Raw) {
	b.Docs = append(b.Docs, doc)
	b.Bytes += int64(len(doc))
}

// Queues are bucketNum bounded queues of batches.
type Queues struct {
	buckets []chan *Batch
}

// NewQueues makes bucketNum queues of bucketSize batches each.
func NewQueues(bucketNum, bucketSize int) *Queues {
	q := &Queues{buckets: make([]chan *Batch, bucketNum)}
	for i := range q.buckets {
		q.buckets[i] = make(chan *Batch, bucketSize)
	}
	return q
}

// Len returns the number of queues.
func (q *Queues) Len() int { return len(q.buckets) }

// Queued returns the number of batches waiting in all queues.
func (q *Queues) Queued() int {
	n := 0
	for _, b := range q.buckets {
		n += len(b)
	}
	return n
}

// Push puts a batch on queue i (modulo the number of queues), waiting for
// room.
func (q *Queues) Push(ctx context.Context, i int, b *Batch) error {
	select {
	case q.buckets[i%len(q.buckets)] <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close tells consumers no more batches will come.
func (q *Queues) Close() {
	for _, b := range q.buckets {
		close(b)
	}
}

// Pop takes the next batch from any of the given queues (all queues when
// buckets is nil). It returns nil, nil once those queues are closed and
// drained.
func (q *Queues) Pop(ctx context.Context, buckets []int) (*Batch, error) {
	if buckets == nil {
		buckets = make([]int, len(q.buckets))
		for i := range buckets {
			buckets[i] = i
		}
	}
	cases := make([]reflect.SelectCase, 0, len(buckets)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	idx := make([]int, 0, len(buckets))
	for _, i := range buckets {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.buckets[i])})
		idx = append(idx, i)
	}
	for len(cases) > 1 {
		chosen, v, ok := reflect.Select(cases)
		if chosen == 0 {
			return nil, ctx.Err()
		}
		if ok {
			return v.Interface().(*Batch), nil
		}
		cases = append(cases[:chosen], cases[chosen+1:]...)
		idx = append(idx[:chosen-1], idx[chosen:]...)
	}
	return nil, nil
}
