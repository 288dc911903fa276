package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine"
)

// Waits on progress: a slow (loaded) machine makes a run slow, not stuck,
// so these waits fail only when nothing a run reports has changed for
// progressStall, or, as a last guard against a hang, after progressLimit.
const (
	progressStall = 2 * time.Minute
	progressLimit = 10 * time.Minute
)

// waitProgressFor waits until cond holds while progress changes.
func waitProgressFor(t *testing.T, what string, cond func() bool, progress func() string) {
	t.Helper()
	start := time.Now()
	last, lastAt := progress(), time.Now()
	for !cond() {
		now := time.Now()
		if p := progress(); p != last {
			last, lastAt = p, now
		}
		if now.Sub(lastAt) > progressStall || now.Sub(start) > progressLimit {
			t.Fatalf("%s: no progress for %s (%s in all); last seen: %s", what, now.Sub(lastAt).Round(time.Second), now.Sub(start).Round(time.Second), last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitRunProgress waits for a run's end while progress changes.
func waitRunProgress(t *testing.T, what string, done <-chan error, progress func() string) error {
	t.Helper()
	var err error
	ended := false
	waitProgressFor(t, what+" to end", func() bool {
		select {
		case err = <-done:
			ended = true
		default:
		}
		return ended
	}, progress)
	return err
}

// runProgress is what a run reports that moves while it works: its phase,
// the copy, the cut-over's step and verification, and each shard's
// subtask (phase, read and applied positions, writes in flight, its part
// in the cut-over).
func runProgress(es ...*engine.Engine) func() string {
	return func() string {
		var b strings.Builder
		for _, e := range es {
			s := e.Status()
			fmt.Fprintf(&b, "[%s copy=%d", s.Phase, s.Copy.Documents)
			if c := s.Cutover; c != nil {
				fmt.Fprintf(&b, " cutover=%s", c.Step)
				if v := c.Verify; v != nil {
					fmt.Fprintf(&b, " verify=%s:%d/%d", v.CurrentNS, v.Done, v.Total)
				}
			}
			for _, sh := range s.Shards {
				fmt.Fprintf(&b, " %s=%s", sh.Shard, sh.Phase)
				if r := sh.Replay; r != nil {
					fmt.Fprintf(&b, " read=%v applied=%v inFlight=%d", r.ReadTS, r.AppliedTS, r.InFlight)
				}
				if c := sh.Cutover; c != nil {
					fmt.Fprintf(&b, " caughtUp=%v drained=%v", c.CaughtUp, c.Drained)
				}
			}
			b.WriteString("]")
		}
		return b.String()
	}
}
