package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Load inserts records 0 to RecordCount-1 (Options.Document) into
// Database.Collection with unordered insertMany batches of BatchSize from
// Threads goroutines, at most Rate documents per second. Documents the
// server refuses (a duplicate key when the collection is already loaded)
// are counted in Stats.Errors and the load goes on; any other error stops
// it. The error is non-nil when a document failed or ctx ended, and Stats
// still says what was done.
func Load(ctx context.Context, client *mongo.Client, opts Options) (Stats, error) {
	o := opts.WithDefaults()
	if err := o.ValidateLoad(); err != nil {
		return Stats{Phase: "load"}, err
	}
	coll := client.Database(o.Database).Collection(o.Collection)
	batchSize := int64(min(int64(o.BatchSize), o.RecordCount))
	batches := (o.RecordCount + batchSize - 1) / batchSize
	docSize := o.DocumentSize()
	slog.Debug("workload load", "ns", o.Database+"."+o.Collection, "records", o.RecordCount, "batch", batchSize, "threads", o.Threads)

	var next atomic.Int64
	fill := func(w *loadWorker, b int64) []bson.Raw {
		first := b * batchSize
		last := min(first+batchSize, o.RecordCount)
		if w.docs == nil {
			w.pcg = rand.NewPCG(0, 0)
			w.rng = rand.New(w.pcg)
			w.buf = make([]byte, 0, int(batchSize)*(docSize+8))
			w.docs = make([]bson.Raw, 0, batchSize)
		}
		// The driver is done with the previous batch's bytes once
		// InsertMany returned, so the buffer is reused.
		w.buf, w.docs = w.buf[:0], w.docs[:0]
		for n := first; n < last; n++ {
			recordRNG(w.pcg, o.Seed, n)
			start := len(w.buf)
			w.buf = appendRecord(w.buf, w.rng, o.KeyType, n, o.FieldCount, o.FieldLength)
			w.docs = append(w.docs, w.buf[start:len(w.buf):len(w.buf)])
		}
		return w.docs
	}
	return insertBatches(ctx, coll, "load", o, func(w *loadWorker) []bson.Raw {
		b := next.Add(1) - 1
		if b >= batches {
			return nil
		}
		return fill(w, b)
	})
}

// InsertManyBaseline inserts pre-generated documents into db.coll with
// plain unordered insertMany batches of batchSize from threads goroutines:
// the raw loader a copy benchmark is compared with. It stops at the first
// error.
func InsertManyBaseline(ctx context.Context, client *mongo.Client, db, coll string, docs []bson.Raw, batchSize, threads int) (Stats, error) {
	if batchSize < 1 {
		return Stats{Phase: "baseline"}, &OptionError{Field: "batchSize", Value: batchSize, Problem: "must be at least 1", Fix: "pass the number of documents per insertMany"}
	}
	if threads < 1 {
		return Stats{Phase: "baseline"}, &OptionError{Field: "threads", Value: threads, Problem: "must be at least 1", Fix: "pass the number of concurrent inserters"}
	}
	if len(docs) == 0 {
		return Stats{Phase: "baseline"}, nil
	}
	var next atomic.Int64
	o := Options{Threads: threads, ProgressInterval: DefaultProgressInterval}
	return insertBatches(ctx, client.Database(db).Collection(coll), "baseline", o, func(*loadWorker) []bson.Raw {
		first := (next.Add(1) - 1) * int64(batchSize)
		if first >= int64(len(docs)) {
			return nil
		}
		return docs[first:min(first+int64(batchSize), int64(len(docs)))]
	})
}

// loadWorker is one inserting goroutine's reusable state.
type loadWorker struct {
	pcg  *rand.PCG
	rng  *rand.Rand
	buf  []byte
	docs []bson.Raw
}

// insertBatches runs o.Threads goroutines that insert the batches nextBatch
// returns until it returns nil.
func insertBatches(parent context.Context, coll *mongo.Collection, phase string, o Options, nextBatch func(*loadWorker) []bson.Raw) (Stats, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	t := newTracker(phase, o.Threads)
	lim := newLimiter(o.Rate)
	insertOpts := options.InsertMany().SetOrdered(false)
	var fatal error
	var fatalOnce sync.Once

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	t.reportProgress(o.Progress, o.ProgressInterval, stopProgress, &progressDone)

	var wg sync.WaitGroup
	for i := range o.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w loadWorker
			for ctx.Err() == nil {
				docs := nextBatch(&w)
				if docs == nil {
					return
				}
				if err := lim.wait(ctx, len(docs)); err != nil {
					return
				}
				start := time.Now()
				_, err := coll.InsertMany(ctx, docs, insertOpts)
				t.hists[i].record(time.Since(start))
				failed, tolerable := countFailed(err, len(docs))
				t.ops[opInsert].Add(int64(len(docs) - failed))
				if err == nil {
					continue
				}
				if stopped(ctx, err) {
					return
				}
				t.fail(int64(failed), err)
				if !tolerable || phase == "baseline" {
					fatalOnce.Do(func() { fatal = err })
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	progressDone.Wait()
	s := t.snapshot()
	ns := coll.Database().Name() + "." + coll.Name()
	switch {
	case fatal != nil:
		return s, fmt.Errorf("%s %s: %w", phase, ns, fatal)
	case parent.Err() != nil:
		return s, fmt.Errorf("%s %s: %w", phase, ns, parent.Err())
	case s.Errors > 0:
		return s, fmt.Errorf("%s %s: %d of %d documents failed; first error: %w", phase, ns, s.Errors, s.Errors+s.Inserts, t.err())
	}
	return s, nil
}

// countFailed returns how many of n documents an insertMany error failed,
// and whether the error only concerns those documents (write errors such
// as a duplicate key), so that the other batches may go on.
func countFailed(err error, n int) (failed int, tolerable bool) {
	if err == nil {
		return 0, true
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 {
		return min(len(bwe.WriteErrors), n), true
	}
	return n, false
}
