package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Status is a snapshot of replay.
type Status struct {
	// AppliedTS is the checkpoint position; everything at or below it is on
	// the target. AppliedTime is its wall-clock time.
	AppliedTS   bson.Timestamp `json:"appliedTS"`
	AppliedTime time.Time      `json:"appliedTime"`
	// ReadTS is the last entry read; NewestTS the source's newest.
	ReadTS   bson.Timestamp `json:"readTS"`
	NewestTS bson.Timestamp `json:"newestTS"`
	// NewestKnown is true once the source's newest position has been read;
	// NewestTS is zero then only when the source's oplog is empty.
	NewestKnown bool `json:"newestKnown"`
	// LagSeconds is NewestTS - AppliedTS in seconds (0 when caught up);
	// it means nothing while LagUnknown is set, and /status leaves it out
	// then.
	LagSeconds float64 `json:"lagSeconds"`
	// LagUnknown says why the lag cannot be known yet (the source's
	// newest position has not been read since replay started); empty once
	// it is known.
	LagUnknown string `json:"lagUnknown,omitempty"`
	// Applied counts applied operations by kind (insert, update, delete,
	// ddl, transaction); Skipped counts entries skipped by reason.
	Applied map[string]int64 `json:"applied"`
	Skipped map[string]int64 `json:"skipped"`
	// WriteCommands counts the commands sent to the target by kind
	// (insert, update, delete, bulkWrite), WritesSent the writes they
	// carried; WritesPerCommand is the ratio over all kinds (0 before the
	// first command). A write sent again after an error counts again.
	WriteCommands    map[string]int64 `json:"writeCommands"`
	WritesSent       map[string]int64 `json:"writesSent"`
	WritesPerCommand float64          `json:"writesPerCommand"`
	// OpsPerSecond is the apply rate over the last seconds.
	OpsPerSecond       float64 `json:"opsPerSecond"`
	BufferedBytes      int64   `json:"bufferedBytes"`
	InFlight           int     `json:"inFlight"`
	ToleratedConflicts int64   `json:"toleratedConflicts"`
	// StaleUpserts counts upserts of a shard's subtask that met a newer
	// version of their document (another shard-key value) and were
	// stepped over (see Replayer.stepOver).
	StaleUpserts int64 `json:"staleUpserts,omitempty"`
	// WaitingOn says what replay waits on now, for people: the target's
	// writes, a migration's hold, or the source's oplog read (how long
	// it has been open, how long the last one took); empty when nothing
	// is pending.
	WaitingOn    string    `json:"waitingOn,omitempty"`
	CheckpointAt time.Time `json:"checkpointAt"`
	// ShardKeyReads counts the queries that read the shard keys of
	// documents on a sharded target (one per command that needs them,
	// see shardkey.go).
	ShardKeyReads int64 `json:"shardKeyReads,omitempty"`
	// Shard is the shard a subtask reads (Options.Shard) and Holds what
	// it held for the ordering rule; empty for a replica set.
	Shard string     `json:"shard,omitempty"`
	Holds HoldStatus `json:"holds"`
}

// LagNotRead is LagUnknown until the source's newest position has been
// read: replay cannot tell how far behind it is.
const LagNotRead = "the source's newest position is not read yet"

// LagKnown reports whether LagSeconds says how far replay is behind.
func (s Status) LagKnown() bool { return s.LagUnknown == "" }

// LagText is the lag as people read it: "12s", or "unknown" and why.
func (s Status) LagText() string {
	if !s.LagKnown() {
		return "unknown (" + s.LagUnknown + ")"
	}
	return fmt.Sprintf("%.0fs", s.LagSeconds)
}

// MarshalJSON writes s with lagSeconds left out while the lag is
// unknown, so that no reader of /status takes it for 0 (caught up).
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status
	out := struct {
		plain
		LagSeconds *float64 `json:"lagSeconds,omitempty"`
	}{plain: plain(s)}
	if s.LagKnown() {
		out.LagSeconds = &s.LagSeconds
	}
	return json.Marshal(out)
}

// CaughtUp reports whether everything the source has written is applied.
// An idle source whose oplog is empty (FerretDB writes no periodic no-ops,
// unlike MongoDB) is caught up from the start.
func (s Status) CaughtUp() bool {
	return s.NewestKnown && s.InFlight == 0 && s.AppliedTS.Compare(s.NewestTS) >= 0
}

// Status returns a snapshot.
func (r *Replayer) Status() Status {
	applied := r.Checkpoint()
	holds := r.hs.status()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Status{
		AppliedTS: applied, AppliedTime: time.Unix(int64(applied.T), 0).UTC(),
		ReadTS: r.readTS, NewestTS: r.newestTS, NewestKnown: r.newestKnown,
		Applied: maps.Clone(r.counts), Skipped: maps.Clone(r.skipped),
		OpsPerSecond: r.rate.perSecond(), ToleratedConflicts: r.tolerated, StaleUpserts: r.staleUpserts, CheckpointAt: r.savedAt, ShardKeyReads: r.keyReads.Load(),
	}
	// The watermark moves past no-ops and skipped entries too, so an idle
	// source shows lag 0 once its newest entry is read.
	if wm := r.wm.Applied(); wm.Compare(s.NewestTS) >= 0 && r.oldestOpen == nil && r.applying == nil {
		s.AppliedTS = maxTS(s.AppliedTS, wm)
	}
	switch {
	case !s.NewestKnown:
		s.LagUnknown = LagNotRead
	case s.NewestTS.T > s.AppliedTS.T:
		s.LagSeconds = float64(s.NewestTS.T - s.AppliedTS.T)
	}
	s.Shard, s.Holds = r.o.Shard, holds
	s.WriteCommands, s.WritesSent = map[string]int64{}, map[string]int64{}
	for k := range numCmdKinds {
		if n := r.commands[k].Load(); n > 0 {
			s.WriteCommands[k.String()] = n
			s.WritesSent[k.String()] = r.writesSent[k].Load()
		}
	}
	s.WritesPerCommand = WritesPerCommand(s.WriteCommands, s.WritesSent)
	s.BufferedBytes = r.budget.InUse()
	s.InFlight = r.wm.InFlight()
	s.WaitingOn = waitingOn(s, r.o.Reader)
	return s
}

// readStater is a reader that tells whether an oplog read is under way
// (source.Tailer in Settle mode).
type readStater interface {
	ReadState() (since time.Time, lastTook time.Duration)
}

// waitingOn says what replay waits on, from its status and its reader:
// writes on their way to the target first (they are what holds the
// checkpoint), then a migration's hold, then the source's oplog read.
func waitingOn(s Status, reader any) string {
	switch {
	case s.InFlight > 0:
		return fmt.Sprintf("the target: %d writes in flight", s.InFlight)
	case s.Holds.Barriers > 0:
		return fmt.Sprintf("other shards: %d namespaces held for a migration", s.Holds.Barriers)
	}
	rs, ok := reader.(readStater)
	if !ok {
		return ""
	}
	since, took := rs.ReadState()
	if since.IsZero() {
		return ""
	}
	w := fmt.Sprintf("the source's oplog read, open %s", time.Since(since).Round(time.Second))
	if took > 0 {
		w += fmt.Sprintf(" (the last took %s)", took.Round(time.Second))
	}
	return w
}

// WritesPerCommand is the writes carried per command sent, over every
// kind; 0 before the first command.
func WritesPerCommand(commands, writes map[string]int64) float64 {
	var c, w int64
	for k, n := range commands {
		c += n
		w += writes[k]
	}
	if c == 0 {
		return 0
	}
	return float64(w) / float64(c)
}

func maxTS(a, b bson.Timestamp) bson.Timestamp {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

// rateMeter measures events per second over a sliding window of one-second
// slots.
type rateMeter struct {
	slots [10]int64
	start int64 // unix second of slots[0]'s current use
}

func (m *rateMeter) add(n int) {
	now := time.Now().Unix()
	m.roll(now)
	m.slots[now%int64(len(m.slots))] += int64(n)
}

func (m *rateMeter) roll(now int64) {
	if m.start == 0 {
		m.start = now
	}
	for s := max(m.start, now-int64(len(m.slots))+1); s <= now; s++ {
		if s > m.start {
			m.slots[s%int64(len(m.slots))] = 0
		}
	}
	m.start = max(m.start, now)
}

func (m *rateMeter) perSecond() float64 {
	now := time.Now().Unix()
	m.roll(now)
	var sum int64
	for _, v := range m.slots {
		sum += v
	}
	return float64(sum) / float64(len(m.slots))
}

// watchNewest polls the source's newest position for the lag.
func (r *Replayer) watchNewest(ctx context.Context) error {
	for {
		if ts, err := r.o.Reader.Newest(ctx); err == nil {
			r.mu.Lock()
			if ts.Compare(r.newestTS) > 0 {
				r.newestTS = ts
			}
			r.newestKnown = true
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
