package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBudgetNeverExceedsLimit(t *testing.T) {
	b := NewBudget(100)
	var inUse, maxSeen atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				n := int64(1 + (i*7+g)%40)
				if err := b.Acquire(context.Background(), n); err != nil {
					t.Error(err)
					return
				}
				cur := inUse.Add(n)
				for {
					m := maxSeen.Load()
					if cur <= m || maxSeen.CompareAndSwap(m, cur) {
						break
					}
				}
				inUse.Add(-n)
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if maxSeen.Load() > 100 || b.Peak() > 100 {
		t.Fatalf("in flight reached %d (peak %d), limit 100", maxSeen.Load(), b.Peak())
	}
	if b.InUse() != 0 {
		t.Fatalf("in use after all releases: %d", b.InUse())
	}
}

func TestBudgetOversizedItemPassesAlone(t *testing.T) {
	b := NewBudget(10)
	if err := b.Acquire(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		_ = b.Acquire(context.Background(), 50)
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("oversized item admitted while other bytes were in flight")
	case <-time.After(50 * time.Millisecond):
	}
	b.Release(5)
	<-got
	if b.InUse() != 50 {
		t.Fatalf("in use = %d, want 50", b.InUse())
	}
}

func TestBudgetAcquireCancelled(t *testing.T) {
	b := NewBudget(10)
	_ = b.Acquire(context.Background(), 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire on a cancelled context succeeded")
	}
	b.Release(10)
	if b.InUse() != 0 {
		t.Fatalf("in use = %d after cancelled acquire", b.InUse())
	}
}

func TestQueuesDrainAfterClose(t *testing.T) {
	q := NewQueues(3, 2)
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		if err := q.Push(ctx, i, &Batch{Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	n := 0
	for {
		b, err := q.Pop(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		n++
	}
	if n != 6 {
		t.Fatalf("popped %d batches, want 6", n)
	}
}
