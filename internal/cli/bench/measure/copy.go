package measure

import (
	"strings"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine"
)

// CopyStages is when a copy entered its copying stage (through the
// source client, or shard by shard), and its status when it was first
// seen done.
type CopyStages struct {
	CopyingAt time.Time
	Done      *engine.Status
}

// WatchCopy polls e's status every 20ms; the returned func stops
// polling and returns what it saw.
func WatchCopy(e *engine.Engine) func() CopyStages {
	var (
		mu   sync.Mutex
		seen CopyStages
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			s := e.Status()
			mu.Lock()
			if strings.HasPrefix(s.Copy.Stage, "copying") && seen.CopyingAt.IsZero() {
				seen.CopyingAt = time.Now()
			}
			if s.Copy.Stage == "done" && seen.Done == nil {
				seen.Done = &s
			}
			mu.Unlock()
		}
	}()
	return func() CopyStages {
		close(stop)
		wg.Wait()
		return seen
	}
}
