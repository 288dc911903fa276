package replay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestLagUnknownUntilNewestRead: until the source's newest position has
// been read, replay's lag is unknown (it used to read 0: caught up), and
// /status leaves lagSeconds out rather than serve 0; once read, the lag
// is the distance from the checkpoint, 0 included.
func TestLagUnknownUntilNewestRead(t *testing.T) {
	r, _, from := newTestReplayer(t, 1, &fakeTarget{docs: map[string]map[int32]int32{}})
	render := func(s Status) map[string]any {
		t.Helper()
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	s := r.Status()
	if s.LagKnown() || s.LagUnknown != LagNotRead || !strings.HasPrefix(s.LagText(), "unknown") {
		t.Errorf("before the newest position is read: known %v, %q, %q", s.LagKnown(), s.LagUnknown, s.LagText())
	}
	if m := render(s); m["lagSeconds"] != nil || m["lagUnknown"] != LagNotRead {
		t.Errorf("/status before the newest position is read: lagSeconds %v, lagUnknown %v", m["lagSeconds"], m["lagUnknown"])
	}

	for _, tc := range []struct {
		newest bson.Timestamp
		lag    float64
	}{{bson.Timestamp{T: from.T + 82}, 82}, {from, 0}} {
		r.mu.Lock()
		r.newestTS, r.newestKnown = tc.newest, true
		r.mu.Unlock()
		s := r.Status()
		if !s.LagKnown() || s.LagSeconds != tc.lag {
			t.Errorf("newest %v: known %v, lag %v, want %v", tc.newest, s.LagKnown(), s.LagSeconds, tc.lag)
		}
		if m := render(s); m["lagSeconds"] != tc.lag || m["lagUnknown"] != nil {
			t.Errorf("/status with newest %v: lagSeconds %v, lagUnknown %v", tc.newest, m["lagSeconds"], m["lagUnknown"])
		}
	}
}

// readState is a reader whose oplog read has been open since since.
type readState struct {
	since time.Time
	took  time.Duration
}

func (r readState) ReadState() (time.Time, time.Duration) { return r.since, r.took }

// TestWaitingOn: the progress line says what replay waits on, writes to
// the target before a migration's hold before the source's oplog read,
// and nothing when nothing is pending.
func TestWaitingOn(t *testing.T) {
	open := time.Now().Add(-12 * time.Second)
	for _, tc := range []struct {
		name   string
		s      Status
		reader any
		want   string
	}{
		{"writes in flight", Status{InFlight: 3}, readState{since: open}, "the target: 3 writes in flight"},
		{"a migration's hold", Status{Holds: HoldStatus{Barriers: 1}}, readState{since: open}, "other shards: 1 namespaces held for a migration"},
		{"a read open", Status{}, readState{since: open, took: 33 * time.Second}, "the source's oplog read, open 12s (the last took 33s)"},
		{"the first read open", Status{}, readState{since: open}, "the source's oplog read, open 12s"},
		{"between reads", Status{}, readState{took: time.Second}, ""},
		{"a reader that cannot tell", Status{}, struct{}{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingOn(tc.s, tc.reader); got != tc.want {
				t.Fatalf("waitingOn = %q, want %q", got, tc.want)
			}
		})
	}
}
