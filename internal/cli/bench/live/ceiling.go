package live

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
)

// A source read is one find of the whole loaded collection by one client,
// before the task starts: the most documents per second any copy can take
// from that server. The copy reads a FerretDB source the first way
// (its _id ranges would each read the whole collection there); a copy
// sorting on _id, as MongoShake's does, reads it the second way.
type sourceRead struct {
	name string
	sort bool
}

var sourceReads = []sourceRead{
	{name: "find, natural order (the copy's read)"},
	{name: "find sorted on _id (MongoShake's read)", sort: true},
}

// readResult is what one source read measured.
type readResult struct {
	docs        int64
	first, last time.Duration // since the find was sent
	sourceCPU   float64
}

// measureSourceReads runs each source read once and prints its figures:
// documents per second over the whole read and from the first document
// to the last, and the source's CPU seconds.
func measureSourceReads(ctx context.Context, out io.Writer, coll *mongo.Collection, cpu measure.Sampler) error {
	fmt.Fprintln(out, "source reads before the task, one client each (the most any copy takes from this source):")
	for _, r := range sourceReads {
		c0 := cpu.Sample()
		res, err := readAll(ctx, coll, r.sort)
		if err != nil {
			return fmt.Errorf("source read %q: %w", r.name, err)
		}
		res.sourceCPU = cpu.Sample().Sub(c0).Source
		span := (res.last - res.first).Seconds()
		fmt.Fprintf(out, "  %-40s %d docs in %.2fs = %s docs/s; first document after %.2fs, then %s docs/s first to last; source CPU %.1fs\n",
			r.name, res.docs, res.last.Seconds(), progress.Count(int64(measure.Div(float64(res.docs), res.last.Seconds()))),
			res.first.Seconds(), progress.Count(int64(measure.Div(float64(res.docs), span))), res.sourceCPU)
	}
	fmt.Fprintln(out)
	return nil
}

func readAll(ctx context.Context, coll *mongo.Collection, sorted bool) (readResult, error) {
	o := options.Find()
	if sorted {
		o.SetSort(bson.D{{Key: "_id", Value: 1}})
	}
	start := time.Now()
	cur, err := coll.Find(ctx, bson.D{}, o)
	if err != nil {
		return readResult{}, err
	}
	defer func() { _ = cur.Close(context.Background()) }()
	var res readResult
	for cur.Next(ctx) {
		if res.docs == 0 {
			res.first = time.Since(start)
		}
		res.docs++
	}
	res.last = time.Since(start)
	return res, cur.Err()
}
