package replay

import (
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// checkpointLoop saves the checkpoint every interval.
func (r *Replayer) checkpointLoop(ctx context.Context) error {
	t := time.NewTicker(r.o.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// A save cut short by the end of the run is not a failure: the
			// final save uses its own context.
			if err := r.saveCheckpoint(ctx, false); err != nil && ctx.Err() == nil {
				r.log.Warn("checkpoint not saved; retrying", "err", err)
			} else if err == nil && r.o.Board != nil {
				if err := r.publish(ctx, false); err != nil && ctx.Err() == nil {
					r.log.Warn("position not published; retrying", "shard", r.o.Shard, "err", err)
				}
			}
		}
	}
}

// Checkpoint returns the position at or below which everything is on the
// target and no open or in-flight transaction begins.
func (r *Replayer) Checkpoint() bson.Timestamp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpointLocked()
}

// checkpointLocked is Checkpoint with r.mu held: the dispatcher changes
// what it reads (seen, applying, the Assembler) under r.mu, so a position
// and the state saved with it agree.
//
// With Options.SaveState the checkpoint may pass open transactions, a
// unit being applied and migrations still holding writes: their entries
// are saved with it (stateLocked). Without it, it stays below each of
// them, so a restart reads them again.
func (r *Replayer) checkpointLocked() bson.Timestamp {
	ts := r.wm.Applied()
	saves := r.o.SaveState != nil
	if r.o.Board != nil {
		// A subtask publishes its checkpoint for the others: up to just
		// below its first write not yet applied (a held one). seen is
		// read first: once nothing is in flight, everything up to it is
		// applied, or buffered (open transactions).
		seen := r.seen
		ts = r.wm.Frontier()
		if r.wm.InFlight() == 0 {
			ts = maxTS(ts, seen)
		}
		if !saves {
			ts = r.hs.cap(ts)
		}
	}
	if r.oldestOpen != nil && !saves {
		ts = minTS(ts, before(*r.oldestOpen))
	}
	if a := r.applying; a != nil {
		if saves {
			ts = minTS(ts, before(a.ts))
		} else {
			ts = minTS(ts, before(a.first))
		}
	}
	return ts
}

// applyingUnit is a unit of several entries from the moment the
// Assembler emits it until it is applied: the checkpoint stays below its
// ts, or below its first entry when no state is saved.
type applyingUnit struct {
	ts, first bson.Timestamp
	entries   []bson.Raw
	id        string // its transaction (oplog.TxnID), if prepared
}

// stateLocked returns what SaveState saves with the checkpoint, with r.mu
// held: the open transactions' entries, those of the unit being applied,
// and the holds' (migration.go).
func (r *Replayer) stateLocked() oplog.AssemblerState {
	st := r.asm.Checkpoint()
	if a := r.applying; a != nil && len(a.entries) > 0 {
		st.Entries = append(st.Entries, a.entries...)
		slices.SortStableFunc(st.Entries, func(x, y bson.Raw) int { return tsOf(x).Compare(tsOf(y)) })
	}
	if r.o.Board != nil {
		st.Entries = append(st.Entries, r.hs.stateEntries(maxTS(r.reapplied, r.readTS))...)
	}
	return st
}

// tsOf returns a raw entry's ts.
func tsOf(raw bson.Raw) bson.Timestamp {
	t, i, _ := raw.Lookup("ts").TimestampOK()
	return bson.Timestamp{T: t, I: i}
}

// settledReader is an OplogReader that knows which positions are final:
// none at or below Settled will ever be handed out (source.Tailer).
type settledReader interface {
	Settled() bson.Timestamp
}

// saveCheckpoint saves the checkpoint; final is Run's save on a clean
// stop, which is not capped at the reader's settled position: a clean
// stop (a drained cut-over above all) records everything applied.
func (r *Replayer) saveCheckpoint(ctx context.Context, final bool) error {
	r.mu.Lock()
	ts := r.checkpointLocked()
	if sr, ok := r.o.Reader.(settledReader); ok && r.o.Board == nil && !final {
		// A resume reads only entries after the saved position: one the
		// reader may still hand out below it (a late entry of a source
		// whose oplog shows entries out of order) would be lost with a
		// crash. A shard's subtask saves its state with its position
		// and is not capped here (docs/architecture.md, "The
		// checkpoint's invariant").
		ts = minTS(ts, sr.Settled())
	}
	unchanged := ts.Compare(r.savedTS) <= 0
	var txns oplog.AssemblerState
	if !unchanged && r.o.SaveState != nil {
		txns = r.stateLocked()
	}
	r.mu.Unlock()
	if unchanged {
		return nil
	}
	switch {
	case r.o.SaveState != nil:
		if err := r.o.SaveState(ctx, ts, txns); err != nil {
			return err
		}
	case r.o.SaveApplied != nil:
		if err := r.o.SaveApplied(ctx, ts); err != nil {
			return err
		}
	case r.o.Store != nil:
		if err := r.o.Store.SaveApplied(ctx, ts); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.savedTS, r.savedAt = ts, time.Now()
	r.mu.Unlock()
	return nil
}

// before returns the position just below ts.
func before(ts bson.Timestamp) bson.Timestamp {
	if ts.I > 0 {
		return bson.Timestamp{T: ts.T, I: ts.I - 1}
	}
	if ts.T == 0 {
		return ts
	}
	return bson.Timestamp{T: ts.T - 1, I: ^uint32(0)}
}

func minTS(a, b bson.Timestamp) bson.Timestamp {
	if a.Compare(b) <= 0 {
		return a
	}
	return b
}
