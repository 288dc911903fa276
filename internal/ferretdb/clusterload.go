package ferretdb

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ClusterLoad is a live load through a Cluster's router on one namespace:
// inserts (new integer keys), updates and deletes, at about Rate
// operations per second.
type ClusterLoad struct {
	C    *Cluster
	NS   string
	Rate float64
	// Quiet is how long the load leaves a chunk alone after it moved;
	// 6s when zero, never when negative. Without the hold-after-migration
	// rule (subtasks sharing a shard board), a recipient's subtask could
	// apply a moved document's next write before the donor's subtask
	// applied its previous one; with it, set Quiet negative.
	Quiet time.Duration
	// Settled, when set, replaces Quiet: a moved chunk is left alone
	// until Settled(t) says every subtask has applied its shard's oplog
	// past second t, when the move ended (a task stopped and restarted
	// meanwhile resumes with backlogs on both sides of a migration).
	Settled func(movedAt uint32) bool

	mu     sync.Mutex
	keys   []int64
	next   int64
	quiet  map[[2]int64]time.Time
	moved  map[[2]int64]uint32
	counts [3]int64 // inserts, updates, deletes
}

// NewClusterLoad returns a load on ns whose documents have the given keys;
// new keys are allocated above next.
func NewClusterLoad(c *Cluster, ns string, keys []int64, next int64, rate float64) *ClusterLoad {
	return &ClusterLoad{C: c, NS: ns, Rate: rate, keys: keys, next: next, quiet: map[[2]int64]time.Time{}, moved: map[[2]int64]uint32{}}
}

// Run writes until ctx ends or a write fails.
func (l *ClusterLoad) Run(ctx context.Context, rng *rand.Rand) error {
	pause := time.Duration(float64(time.Second) / max(l.Rate, 0.1))
	for ctx.Err() == nil {
		time.Sleep(pause)
		l.mu.Lock()
		var err error
		switch n := rng.IntN(10); {
		case n < 4 || len(l.keys) < 50:
			k := l.next
			l.next += 7
			l.mu.Unlock()
			err = l.C.Insert(ctx, l.NS, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "live"}})
			l.mu.Lock()
			if err == nil {
				l.keys = append(l.keys, k)
				l.counts[0]++
			}
		default:
			i := rng.IntN(len(l.keys))
			k := l.keys[i]
			if l.quietKey(k) {
				l.mu.Unlock()
				continue
			}
			if n < 8 {
				l.mu.Unlock()
				err = l.C.Update(ctx, l.NS, k, bson.D{{Key: "v", Value: rng.IntN(1000)}, {Key: "at", Value: time.Now().UnixNano()}})
				l.mu.Lock()
				l.counts[1]++
			} else {
				l.keys[i] = l.keys[len(l.keys)-1]
				l.keys = l.keys[:len(l.keys)-1]
				l.mu.Unlock()
				err = l.C.Delete(ctx, l.NS, k)
				l.mu.Lock()
				l.counts[2]++
			}
		}
		l.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

func (l *ClusterLoad) quietKey(k int64) bool {
	for r, until := range l.quiet {
		if k < r[0] || k >= r[1] {
			continue
		}
		if at, ok := l.moved[r]; ok && l.Settled != nil {
			if !l.Settled(at) {
				return true
			}
			continue
		}
		if time.Now().Before(until) {
			return true
		}
	}
	return false
}

// Move moves the chunk [lo, hi) to shard to and keeps the load off it for
// Quiet; it returns how many documents moved.
func (l *ClusterLoad) Move(ctx context.Context, lo, hi int64, to int) (int, error) {
	quiet := l.Quiet
	if quiet == 0 {
		quiet = 6 * time.Second
	}
	if quiet < 0 {
		return l.C.MoveChunk(ctx, l.NS, lo, hi, to)
	}
	l.mu.Lock()
	l.quiet[[2]int64{lo, hi}] = time.Now().Add(time.Hour)
	l.mu.Unlock()
	n, err := l.C.MoveChunk(ctx, l.NS, lo, hi, to)
	l.mu.Lock()
	l.quiet[[2]int64{lo, hi}] = time.Now().Add(quiet)
	l.moved[[2]int64{lo, hi}] = uint32(time.Now().Unix())
	l.mu.Unlock()
	return n, err
}

// Counts returns the inserts, updates and deletes written so far.
func (l *ClusterLoad) Counts() (inserts, updates, deletes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[0], l.counts[1], l.counts[2]
}
