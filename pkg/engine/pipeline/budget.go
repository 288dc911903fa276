package pipeline

import (
	"context"
	"sync"
)

// Budget is a byte semaphore: Acquire blocks while the bytes in flight
// would exceed the limit. One item larger than the whole budget is let
// through alone (it waits until nothing else is in flight), so a 16 MiB
// document never deadlocks a smaller budget.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	inUse   int64
	peak    int64
	waiters []*waiter
}

type waiter struct {
	n     int64
	ready chan struct{}
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit returns the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Acquire charges n bytes, waiting for room. It returns ctx's error if ctx
// ends first, in which case nothing is charged.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.fits(n) {
		b.take(n)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready:
			// granted while we were giving up: hand it back
			b.inUse -= n
			b.wake()
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.wake()
		}
		return ctx.Err()
	}
}

// Release returns n bytes.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	b.inUse -= n
	if b.inUse < 0 {
		panic("pipeline: budget released more than acquired")
	}
	b.wake()
	b.mu.Unlock()
}

// InUse returns the bytes in flight.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}

// Peak returns the most bytes ever in flight at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

func (b *Budget) fits(n int64) bool { return b.inUse+n <= b.limit || b.inUse == 0 }

func (b *Budget) take(n int64) {
	b.inUse += n
	if b.inUse > b.peak {
		b.peak = b.inUse
	}
}

// wake grants waiters in arrival order while they fit; b.mu is held.
func (b *Budget) wake() {
	for len(b.waiters) > 0 && b.fits(b.waiters[0].n) {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.take(w.n)
		close(w.ready)
	}
}
