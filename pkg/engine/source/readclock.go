package source

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// readClock is what a Settle-mode tailer's reads have seen, shared between
// the goroutine that reads (Next) and the one that asks for the newest
// position (Newest).
type readClock struct {
	mu sync.Mutex
	// startedN counts reads started, doneN the last one finished (reads
	// run one at a time, so every read up to it has finished).
	startedN, doneN uint64
	// startedAt is when the read in progress (or the last one) started;
	// doneAt when the last finished one did.
	startedAt, doneAt time.Time
	// running is true while a read is under way; took is how long the
	// last read that ended (finished or not) ran.
	running bool
	took    time.Duration
	// seen is the highest ts finished reads saw; handed the highest the
	// tailer handed out.
	seen, handed bson.Timestamp
	known        bool
	// answered is when the read behind Newest's last answer started.
	answered time.Time
	// finished is closed, and replaced, whenever a read finishes.
	finished chan struct{}
}

func (c *readClock) started() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startedN++
	c.startedAt = time.Now()
	c.running = true
}

// failed records a read that ended without reading to its end.
func (c *readClock) failed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.took = false, time.Since(c.startedAt)
}

// done records a read that finished after seeing entries up to newest, the
// tailer having handed out entries up to handed.
func (c *readClock) done(newest, handed bson.Timestamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.doneN, c.doneAt, c.known, c.running, c.took = c.startedN, c.startedAt, true, false, time.Since(c.startedAt)
	if newest.Compare(c.seen) > 0 {
		c.seen = newest
	}
	if handed.Compare(c.handed) > 0 {
		c.handed = handed
	}
	if c.finished != nil {
		close(c.finished)
		c.finished = nil
	}
}

func (c *readClock) handedOut(ts bson.Timestamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts.Compare(c.handed) > 0 {
		c.handed = ts
	}
}

// newest returns the highest ts the reads saw: at once when it is past
// what was handed out, otherwise once a read that starts after the call
// has finished. ok is false when within wait no read was under way or
// started (nobody is reading), or when none finished within readCap.
func (c *readClock) newest(ctx context.Context, wait time.Duration) (bson.Timestamp, bool, error) {
	c.mu.Lock()
	if c.known && c.seen.Compare(c.handed) > 0 {
		ts := c.seen
		c.answered = c.doneAt
		c.mu.Unlock()
		return ts, true, nil
	}
	want := c.startedN + 1
	timer := time.NewTimer(wait)
	defer timer.Stop()
	capped := false
	for c.doneN < want {
		if c.finished == nil {
			c.finished = make(chan struct{})
		}
		ch := c.finished
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return bson.Timestamp{}, false, ctx.Err()
		case <-timer.C:
			c.mu.Lock()
			if capped || (c.startedN < want && !c.running) {
				c.mu.Unlock()
				return bson.Timestamp{}, false, nil
			}
			// A read is under way (on a server where each one reads the
			// whole oplog, it may take long): wait for it, and for the
			// one after it if it started before the call, rather than
			// query beside them.
			capped = true
			timer.Reset(readCap)
			c.mu.Unlock()
		case <-ch:
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	c.answered = c.doneAt
	return c.seen, true, nil
}

// readCap bounds how long Newest waits for a read under way.
const readCap = 5 * time.Minute

// queried records an answer Newest read from the oplog itself, with the
// query started at at.
func (c *readClock) queried(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answered = at
}

func (c *readClock) answeredAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

// ReadState reports, from any goroutine, when the Settle-mode read under
// way started (zero when none is: the tailer waits for its next poll, or
// keeps a tailable cursor) and how long the last read that ended took:
// where replay's wait goes on a source whose every oplog query scans the
// oplog (FerretDB).
func (t *Tailer) ReadState() (since time.Time, lastTook time.Duration) {
	c := &t.reads
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		since = c.startedAt
	}
	return since, c.took
}
