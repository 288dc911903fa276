package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// overwriteChunk is the most replacements sent in one bulk write.
const overwriteChunk = 50

// Result counts what one batch did on the target.
type Result struct {
	Inserted    int64
	Overwritten int64
	Skipped     int64
	Retries     int
}

// Writer writes full-copy batches.
type Writer struct {
	// MaxRetries bounds retries of retryable errors per batch.
	MaxRetries int
	// Backoff is the first retry delay; it doubles up to 30s.
	Backoff time.Duration
	// Log receives retry warnings.
	Log *slog.Logger
	// SerialUpdates sends the overwrites (replacement upserts) to one
	// database one bulk write at a time, for a target whose profile asks
	// for it (conn.Profile.SerialUpdates: FerretDB v1 can stop answering
	// when concurrent updates to one database wait on each other).
	SerialUpdates bool

	// updateTurns are the databases' turns to send overwrites.
	updateTurns Turns
}

// Insert writes docs into coll with unordered inserts. Documents whose _id
// exists already are overwritten, skipped or reported as ErrConflict as
// policy says. own=true means the documents may have been written by an
// earlier, interrupted attempt of this same work, so existing ones are
// overwritten whatever the policy. A retried batch is also treated as own.
func (w *Writer) Insert(ctx context.Context, coll *mongo.Collection, docs []bson.Raw, policy config.ConflictPolicy, own bool) (Result, error) {
	var res Result
	backoff := w.Backoff
	if backoff == 0 {
		backoff = 200 * time.Millisecond
	}
	for {
		r, err := w.insertOnce(ctx, coll, docs, policy, own)
		res.Inserted += r.Inserted
		res.Overwritten += r.Overwritten
		res.Skipped += r.Skipped
		if err == nil || Classify(err) != Retryable || res.Retries >= w.MaxRetries || ctx.Err() != nil {
			return res, err
		}
		res.Retries++
		if w.Log != nil {
			w.Log.Warn("retrying write", "ns", ns(coll), "attempt", res.Retries, "err", err)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
		// part of the batch may have landed: existing documents are ours now
		own = true
		res.Inserted = 0
	}
}

func (w *Writer) insertOnce(ctx context.Context, coll *mongo.Collection, docs []bson.Raw, policy config.ConflictPolicy, own bool) (Result, error) {
	var res Result
	if len(docs) == 0 {
		return res, nil
	}
	batch := make([]any, len(docs))
	for i, d := range docs {
		batch[i] = d
	}
	ir, err := coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false).SetBypassDocumentValidation(true))
	if ir != nil {
		res.Inserted = int64(len(ir.InsertedIDs))
	}
	if err == nil {
		res.Inserted = int64(len(docs))
		return res, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || mixedWriteErrors(err) || bwe.WriteConcernError != nil {
		return res, fmt.Errorf("insert into %s: %w", ns(coll), err)
	}
	// Only duplicate keys: every other document of the batch was inserted.
	res.Inserted = int64(len(docs) - len(bwe.WriteErrors))
	if !own && policy == config.ConflictFail {
		id := docs[bwe.WriteErrors[0].Index].Lookup("_id")
		return res, fmt.Errorf("%s: _id %s: %w (and %d more in this batch); the task's fullSync.onConflict is fail: empty the target, set fullSync.dropTarget, or choose onConflict overwrite or skip",
			ns(coll), id.String(), ErrConflict, len(bwe.WriteErrors)-1)
	}
	if !own && policy == config.ConflictSkip {
		res.Skipped = int64(len(bwe.WriteErrors))
		return res, nil
	}
	models := make([]mongo.WriteModel, 0, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		d := docs[we.Index]
		filter, err := bson.Marshal(bson.D{{Key: "_id", Value: d.Lookup("_id")}})
		if err != nil {
			return res, fmt.Errorf("overwrite existing documents in %s: %w", ns(coll), err)
		}
		models = append(models, Replace(filter, d))
	}
	// Small bulks: some servers (FerretDB) stall on large upsert bulks.
	for len(models) > 0 {
		n := min(len(models), overwriteChunk)
		if err := w.overwrite(ctx, coll, models[:n]); err != nil {
			return res, fmt.Errorf("overwrite existing documents in %s: %w", ns(coll), err)
		}
		models = models[n:]
	}
	res.Overwritten = int64(len(bwe.WriteErrors))
	return res, nil
}

// overwrite sends one bulk write of replacement upserts, waiting for the
// database's turn when SerialUpdates is set.
func (w *Writer) overwrite(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	if w.SerialUpdates {
		release, err := w.updateTurns.Take(ctx, coll.Database().Name())
		if err != nil {
			return err
		}
		defer release()
	}
	_, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false).SetBypassDocumentValidation(true))
	return err
}

func ns(c *mongo.Collection) string { return c.Database().Name() + "." + c.Name() }
