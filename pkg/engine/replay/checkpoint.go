package replay

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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
			if err := r.saveCheckpoint(ctx); err != nil && ctx.Err() == nil {
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
// what it reads (seen, hold, open transactions, txns) under r.mu, so a
// position and the transactions saved with it agree.
func (r *Replayer) checkpointLocked() bson.Timestamp {
	ts := r.wm.Applied()
	if r.o.Board != nil {
		// A subtask publishes its checkpoint for the others: up to just
		// below its first write not yet applied (a held one), and below
		// the migrations it holds writes for. seen is read first: once
		// nothing is in flight, everything up to it is applied, or held
		// back below by a cap (open transactions).
		seen := r.seen
		ts = r.wm.Frontier()
		if r.wm.InFlight() == 0 {
			ts = maxTS(ts, seen)
		}
		ts = r.hs.cap(ts)
	}
	if r.oldestOpen != nil {
		ts = minTS(ts, before(*r.oldestOpen))
	}
	if r.hold != nil {
		ts = minTS(ts, before(*r.hold))
	}
	return ts
}

func (r *Replayer) saveCheckpoint(ctx context.Context) error {
	r.mu.Lock()
	ts := r.checkpointLocked()
	txns := r.txns
	unchanged := ts.Compare(r.savedTS) <= 0
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
