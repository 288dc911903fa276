package workload

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Run executes the workload's operation mix against Database.Collection
// from Threads goroutines, at most Rate operations per second, until
// Operations operations were issued, Duration passed or ctx ends.
//
//   - A read is a FindOne by _id, an update an UpdateOne that $sets one
//     random field to a new random string, a delete a DeleteOne by _id.
//     Their keys are drawn with Distribution over the key space: the loaded
//     records, earlier runs' inserts and this run's inserts so far. A key
//     that is gone (deleted by a mixed run) counts in Stats.NotFound, not
//     as an error.
//   - An insert is an InsertOne of Options.Document(n) for a new key n,
//     counting up from RecordCount or from just above the highest key
//     already in the collection, whichever is larger, so repeated runs do
//     not collide.
//
// Reaching Operations or Duration is a normal end. The error is non-nil
// when an operation failed (Stats.Errors) or ctx ended; Stats still says
// what was done.
func Run(ctx context.Context, client *mongo.Client, opts Options) (Stats, error) {
	o := opts.WithDefaults()
	if err := o.ValidateRun(); err != nil {
		return Stats{Phase: "run"}, err
	}
	mix := o.Mix()
	coll := client.Database(o.Database).Collection(o.Collection)
	ns := o.Database + "." + o.Collection
	insertStart := o.RecordCount
	if mix.Insert > 0 {
		next, err := nextFreeKey(ctx, coll, o.KeyType)
		if err != nil {
			return Stats{Phase: "run"}, fmt.Errorf("run %s: find the highest existing key: %w", ns, err)
		}
		insertStart = max(insertStart, next)
	}
	slog.Debug("workload run", "ns", ns, "workload", o.Workload, "distribution", o.Distribution,
		"threads", o.Threads, "operations", o.Operations, "duration", o.Duration, "insertStart", insertStart)

	runCtx, cancel := context.WithCancel(ctx)
	if o.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, o.Duration)
	}
	defer cancel()

	r := &runner{
		o:           o,
		coll:        coll,
		mix:         mix,
		t:           newTracker("run", o.Threads),
		lim:         newLimiter(o.Rate),
		insertStart: insertStart,
	}
	if o.Distribution == Zipfian {
		r.zipf = NewScrambledZipfian()
	}
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	r.t.reportProgress(o.Progress, o.ProgressInterval, stopProgress, &progressDone)

	var wg sync.WaitGroup
	for i := range o.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(runCtx, i)
		}()
	}
	wg.Wait()
	close(stopProgress)
	progressDone.Wait()

	s := r.t.snapshot()
	switch {
	case ctx.Err() != nil:
		return s, fmt.Errorf("run %s: %w", ns, ctx.Err())
	case s.Errors > 0:
		return s, fmt.Errorf("run %s: %d of %d operations failed; first error: %w", ns, s.Errors, s.Errors+s.Ops(), r.t.err())
	}
	return s, nil
}

// runner is the state the run phase's workers share.
type runner struct {
	o           Options
	coll        *mongo.Collection
	mix         Mix
	t           *tracker
	lim         *limiter
	zipf        *ScrambledZipfian
	insertStart int64

	issued     atomic.Int64 // operations started, for Options.Operations
	nextInsert atomic.Int64 // insert keys handed out, from insertStart
	inserted   atomic.Int64 // inserts completed
}

// work is one worker's loop.
func (r *runner) work(ctx context.Context, worker int) {
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 0x72756e0000000000|uint64(worker)))
	docPCG := rand.NewPCG(0, 0)
	docRNG := rand.New(docPCG)
	var filter, update, doc []byte
	hist := r.t.hists[worker]
	for {
		if r.o.Operations > 0 && r.issued.Add(1) > r.o.Operations {
			return
		}
		if err := r.lim.wait(ctx, 1); err != nil {
			return
		}
		kind := r.pick(rng)
		var key int64
		if kind == opInsert {
			key = r.insertStart + r.nextInsert.Add(1) - 1
		} else {
			key = r.chooseKey(rng)
		}
		filter = appendKeyFilter(filter[:0], r.o.KeyType, key)

		var found bool
		var err error
		start := time.Now()
		switch kind {
		case opRead:
			err = r.coll.FindOne(ctx, bson.Raw(filter)).Err()
			found = err == nil
			if errors.Is(err, mongo.ErrNoDocuments) {
				err = nil
			}
		case opUpdate:
			update = appendSetField(update[:0], rng, rng.IntN(r.o.FieldCount), r.o.FieldLength)
			var res *mongo.UpdateResult
			if res, err = r.coll.UpdateOne(ctx, bson.Raw(filter), bson.Raw(update)); err == nil {
				found = res.MatchedCount > 0
			}
		case opInsert:
			recordRNG(docPCG, r.o.Seed, key)
			doc = appendRecord(doc[:0], docRNG, r.o.KeyType, key, r.o.FieldCount, r.o.FieldLength)
			_, err = r.coll.InsertOne(ctx, bson.Raw(doc))
			found = true
		case opDelete:
			var res *mongo.DeleteResult
			if res, err = r.coll.DeleteOne(ctx, bson.Raw(filter)); err == nil {
				found = res.DeletedCount > 0
			}
		}
		elapsed := time.Since(start)
		if err != nil {
			if stopped(ctx, err) {
				return // Duration or ctx ended mid-operation: not a failure
			}
			r.t.fail(1, fmt.Errorf("%s %v: %w", kind, r.o.KeyType.Key(key), err))
			continue
		}
		hist.record(elapsed)
		r.t.ops[kind].Add(1)
		if !found {
			r.t.notFound.Add(1)
		}
		if kind == opInsert {
			r.inserted.Add(1)
		}
	}
}

// stopped reports whether err means the phase is ending rather than the
// operation failing: ctx is done, or the driver refused to start an
// operation that could not finish before ctx's deadline (it does so a
// round trip ahead of the deadline).
func stopped(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < time.Second
}

// pick draws an operation kind with the mix's weights.
func (r *runner) pick(rng *rand.Rand) opKind {
	u := rng.Float64() * r.mix.total()
	switch {
	case u < r.mix.Read:
		return opRead
	case u < r.mix.Read+r.mix.Update:
		return opUpdate
	case u < r.mix.Read+r.mix.Update+r.mix.Insert:
		return opInsert
	case r.mix.Delete > 0:
		return opDelete
	}
	// u == total by rounding: the last kind with a weight.
	switch {
	case r.mix.Insert > 0:
		return opInsert
	case r.mix.Update > 0:
		return opUpdate
	}
	return opRead
}

// chooseKey draws an existing key: the key space is [0, insertStart +
// completed inserts). A key inserted by another worker that is still in
// flight may be drawn; it then counts as not found.
func (r *runner) chooseKey(rng *rand.Rand) int64 {
	n := r.insertStart + r.inserted.Load()
	if r.zipf != nil {
		return r.zipf.Next(rng, n)
	}
	return rng.Int64N(n)
}

// appendKeyFilter appends the document {_id: key n}.
func appendKeyFilter(dst []byte, t KeyType, n int64) []byte {
	dst = append(dst, 0, 0, 0, 0)
	if t == KeyInt {
		dst = appendInt64Element(dst, "_id", n)
	} else {
		dst = append(dst, byte(bson.TypeString), '_', 'i', 'd', 0)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(keyPrefix)+max(keyDigits, digits(n))+1))
		dst = appendStringKey(dst, n)
		dst = append(dst, 0)
	}
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst, uint32(len(dst)))
	return dst
}

// digits returns the number of decimal digits of n >= 0.
func digits(n int64) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// appendSetField appends {$set: {field<i>: <random string of length>}}.
func appendSetField(dst []byte, rng *rand.Rand, field, length int) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, byte(bson.TypeEmbeddedDocument), '$', 's', 'e', 't', 0)
	inner := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, byte(bson.TypeString))
	dst = append(dst, fieldName(field)...)
	dst = append(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(length+1))
	m := len(dst)
	dst = slices.Grow(dst, length)[:m+length]
	fillRandom(rng, dst[m:])
	dst = append(dst, 0, 0) // string's NUL, inner document's end
	binary.LittleEndian.PutUint32(dst[inner:], uint32(len(dst)-inner))
	dst = append(dst, 0)
	binary.LittleEndian.PutUint32(dst, uint32(len(dst)))
	return dst
}

// nextFreeKey returns one more than the highest generated key of type t in
// the collection, or 0 when there is none. String keys are compared as
// strings, which orders them by number while they have ten digits.
func nextFreeKey(ctx context.Context, coll *mongo.Collection, t KeyType) (int64, error) {
	var filter bson.D
	if t == KeyInt {
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: 0}}}}
	} else {
		// '9' < ':' so this holds every "user" followed by digits.
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: keyPrefix + "0"}, {Key: "$lt", Value: keyPrefix + ":"}}}}
	}
	raw, err := coll.FindOne(ctx, filter, options.FindOne().
		SetSort(bson.D{{Key: "_id", Value: -1}}).
		SetProjection(bson.D{{Key: "_id", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, ok := parseKey(raw.Lookup("_id"))
	if !ok {
		return 0, nil
	}
	return n + 1, nil
}
