package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// windowInterval is how often the source oplogs' windows are read.
const windowInterval = 5 * time.Second

// OplogWindow is how much of a source oplog lies behind the task's
// checkpoint: the room left before a restart could no longer resume.
type OplogWindow struct {
	// Shard is the shard's name for a sharded source, empty for a replica
	// set.
	Shard string `json:"shard,omitempty"`
	// Oldest and Newest are the ts of the oldest and the newest entry the
	// oplog holds. Where a query of the newest entry reads the whole
	// oplog (FerretDB), Newest is the server's clock instead.
	Oldest bson.Timestamp `json:"oldest"`
	Newest bson.Timestamp `json:"newest"`
	// Checkpoint is where a restart would resume on this oplog: the saved
	// checkpoint, or the start position before anything was applied.
	Checkpoint bson.Timestamp `json:"checkpoint"`
	// SpanSeconds is Newest − Oldest: how much time the oplog holds.
	SpanSeconds float64 `json:"spanSeconds"`
	// HeadroomSeconds is Checkpoint − Oldest: how much older than the
	// checkpoint the oplog's oldest entry may grow before the window is
	// lost (negative once it is). Unset while the checkpoint is a start
	// position taken on an empty oplog, which no entry marks.
	HeadroomSeconds *float64 `json:"headroomSeconds,omitempty"`
}

// watchWindows reads the window of every source oplog the task replays
// (each shard's this process runs, for a sharded source) until ctx ends,
// and keeps them in r. The oplogs to watch, with their checkpoints, are
// the streamer's (streamer.OplogSides: read from the checkpoint store,
// what a restart resumes from). A failed read keeps the last figures: the
// tailer reports the source's problems. The run watches only a task that
// tails an oplog (watchesWindows).
func (r *runState) watchWindows(ctx context.Context, s streamer) {
	t := time.NewTicker(windowInterval)
	defer t.Stop()
	for {
		var out []OplogWindow
		sides, err := s.OplogSides(ctx)
		if err == nil {
			for _, side := range sides {
				w, err := readWindow(ctx, side)
				if err != nil {
					out = nil
					break
				}
				out = append(out, w)
			}
		}
		if out != nil {
			r.setWindows(out)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchesWindows reports whether a run of task reads its source oplogs'
// windows: one that replays an oplog through the tailer (not mode full,
// change streams or the tests' scripted reader, Options.Reader).
func watchesWindows(task *config.Task, opts Options) bool {
	return task.Mode != config.ModeFull && task.Incremental.Method != config.MethodChangeStream && opts.Reader == nil
}

// readWindow reads an oplog's oldest and newest positions. On a source
// where a query of the newest entry reads and decodes the whole oplog
// (conn.Profile.OplogQueriesScan), the newest position is the server's
// clock: read every windowInterval, such a query would keep the source
// busy throughout the task, slowing the copy's reads and the tailer's.
func readWindow(ctx context.Context, s source.OplogSide) (OplogWindow, error) {
	var oldest, newest bson.Timestamp
	var err error
	if s.ByClock {
		if oldest, err = source.OldestTS(ctx, s.Client); err == nil && !oldest.IsZero() {
			newest, err = source.ServerTime(ctx, s.Client)
			newest = maxTimestamp(newest, oldest)
		}
	} else {
		oldest, newest, err = source.OplogBounds(ctx, s.Client)
	}
	if err != nil {
		return OplogWindow{}, err
	}
	return windowOf(s.Shard, s.From, s.SinceEmpty, oldest, newest), nil
}

func maxTimestamp(a, b bson.Timestamp) bson.Timestamp {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}

// windowOf works out an oplog's span and the headroom behind a checkpoint
// from its oldest and newest entries.
func windowOf(shard string, from bson.Timestamp, sinceEmpty bool, oldest, newest bson.Timestamp) OplogWindow {
	w := OplogWindow{Shard: shard, Oldest: oldest, Newest: newest, Checkpoint: from}
	if oldest.IsZero() {
		return w
	}
	w.SpanSeconds = float64(newest.T) - float64(oldest.T)
	if !from.IsZero() && (!sinceEmpty || from.Compare(oldest) >= 0) {
		h := float64(from.T) - float64(oldest.T)
		w.HeadroomSeconds = &h
	}
	return w
}
