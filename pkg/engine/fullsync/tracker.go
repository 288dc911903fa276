package fullsync

import (
	"sync"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// tracker knows which batches of each range are still unwritten, to tell
// when a range is finished.
type tracker struct {
	mu     sync.Mutex
	ranges map[string]*rangeState
}

type rangeState struct {
	r            checkpoint.Range
	own          bool
	pending      int
	readDone     bool
	docs, bytes  int64
	pendingBytes int64
}

func newTracker() *tracker { return &tracker{ranges: map[string]*rangeState{}} }

func (t *tracker) begin(r checkpoint.Range, own bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ranges[r.ID] = &rangeState{r: r, own: own}
}

func (t *tracker) rangeOf(id string) (checkpoint.Range, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranges[id]
	return s.r, s.own
}

func (t *tracker) pushed(id string, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranges[id]
	s.pending++
	s.pendingBytes += bytes
}

// written un-charges a batch whether or not its write succeeded.
func (t *tracker) written(id string, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ranges[id].pendingBytes -= bytes
}

func (t *tracker) batchDone(id string, docs, bytes int64) (bool, int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranges[id]
	s.pending--
	s.docs += docs
	s.bytes += bytes
	return s.readDone && s.pending == 0, s.docs, s.bytes
}

func (t *tracker) readerFinished(id string) (bool, int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranges[id]
	s.readDone = true
	return s.pending == 0, s.docs, s.bytes
}

// drainUnwritten returns the bytes of batches pushed but never written
// (the copy stopped), and forgets them.
func (t *tracker) drainUnwritten() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int64
	for _, s := range t.ranges {
		if s.pendingBytes > 0 {
			out = append(out, s.pendingBytes)
			s.pendingBytes = 0
		}
	}
	return out
}
