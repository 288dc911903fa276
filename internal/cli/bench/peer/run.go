package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// pollEvery is how often the target is read for the figures while it is
// empty, while nothing was counted yet, and as a count nears its goal;
// in between a count is read at most every pollMax (pollDelay). Each
// count is a collStats, which makes FerretDB walk every page of the
// target's database (SQLite's dbstat): every 100 ms throughout a copy of
// 50,000 documents, that was 60% of the target's CPU.
const (
	pollEvery = 100 * time.Millisecond
	pollMax   = time.Second
)

// cappedCleanup is how often each source trims its oplog: FerretDB's
// default. The oplog (--oplog-size) holds every change of a run, so nothing
// needs trimming, while each trimming pass walks the whole oplog (the
// tests' every second took half the source's CPU during a copy).
const cappedCleanup = time.Minute

// result is one tool's figures; times in seconds.
type result struct {
	tool               string
	firstDoc, copyDone float64 // since the tool's process started
	copyRate           float64 // documents per second, first to last document
	insertRate         float64 // live inserts per second, first insert to the target holding all
	lastVisible        float64 // since the source acknowledged the last update or delete
	cpuCopy, cpuReplay cpuSeconds
	loadStart, loadEnd string
	log                string
}

// cpuSeconds is the CPU seconds of the tool's process and of the servers.
type cpuSeconds struct{ tool, source, target float64 }

type cpuSampler struct{ tool, source, target int }

func (s cpuSampler) sample() cpuSeconds {
	return cpuSeconds{measure.ProcessCPU(s.tool), measure.ProcessCPU(s.source), measure.ProcessCPU(s.target)}
}

func (c cpuSeconds) sub(o cpuSeconds) cpuSeconds {
	return cpuSeconds{c.tool - o.tool, c.source - o.source, c.target - o.target}
}

// runTool loads a fresh source, starts the tool on it, and measures it
// from the target.
func runTool(ctx context.Context, out io.Writer, t tool, o workload.Options, f benchPeerFlags) (result, error) {
	r := result{tool: t.name()}
	fmt.Fprintf(out, "\n== %s\n", t.name())
	pair, err := servers.StartPairWith(ctx, ferretdb.Options{OplogBytes: f.oplogMiB << 20, CappedCleanup: cappedCleanup})
	if err != nil {
		return r, err
	}
	defer pair.Stop()
	sc, err := pair.Source.Client(ctx)
	if err != nil {
		return r, fmt.Errorf("connect to the source: %w", err)
	}
	defer func() { _ = sc.Disconnect(context.Background()) }()
	tc, err := pair.Target.Client(ctx)
	if err != nil {
		return r, fmt.Errorf("connect to the target: %w", err)
	}
	defer func() { _ = tc.Disconnect(context.Background()) }()

	fmt.Fprintf(out, "load:      %d documents into the source... ", o.RecordCount)
	ls, err := workload.Load(ctx, sc, o)
	if err != nil {
		return r, fmt.Errorf("load the source: %w", err)
	}
	fmt.Fprintf(out, "%.1fs (%s docs/s)\n", ls.Elapsed.Seconds(), progress.Count(int64(ls.OpsPerSec)))

	r.loadStart = loadAverage()
	fmt.Fprintf(out, "start:     %s (%s)\n", t.name(), r.loadStart)
	p, err := startTool(t, f.dir, pair.Source, pair.Target)
	if err != nil {
		return r, err
	}
	r.log = p.log
	defer p.stop()
	cpu := cpuSampler{tool: p.pid(), source: pair.Source.Pid(), target: pair.Target.Pid()}
	cpu0 := cpu.sample()
	coll := tc.Database(measure.DB).Collection(measure.Collection)
	w := watcher{coll: coll, exited: p.exited, timeout: f.timeout}

	var first time.Time
	last, err := w.countAtLeast(ctx, o.RecordCount, func(n int64, at time.Time) {
		if n > 0 && first.IsZero() {
			first = at
		}
	})
	if err != nil {
		return r, fmt.Errorf("full copy: %w (log: %s)", err, p.log)
	}
	cpuCopy := cpu.sample()
	r.cpuCopy = cpuCopy.sub(cpu0)
	r.firstDoc, r.copyDone = first.Sub(p.started).Seconds(), last.Sub(p.started).Seconds()
	r.copyRate = measure.Div(float64(o.RecordCount), last.Sub(first).Seconds())
	fmt.Fprintf(out, "copy:      first document after %.1fs, all %d after %.1fs: %.0f docs/s first to last (%s)\n",
		r.firstDoc, o.RecordCount, r.copyDone, r.copyRate, loadAverage())

	visible, lastOp, err := measureLive(ctx, out, w, sc.Database(measure.DB).Collection(measure.Collection), o, f, &r)
	if err != nil {
		return r, fmt.Errorf("%w (log: %s)", err, p.log)
	}
	r.cpuReplay = cpu.sample().sub(cpuCopy)
	r.lastVisible = visible.Sub(lastOp).Seconds()
	r.loadEnd = loadAverage()
	fmt.Fprintf(out, "updates:   %d updates and %d deletes, the last visible on the target %.1fs after the source acknowledged it (%s)\n",
		f.updates, f.deletes, r.lastVisible, r.loadEnd)
	fmt.Fprintf(out, "cpu:       %s %.1fs copying, %.1fs replaying; source %.1fs, %.1fs; target %.1fs, %.1fs\n",
		t.name(), r.cpuCopy.tool, r.cpuReplay.tool, r.cpuCopy.source, r.cpuReplay.source, r.cpuCopy.target, r.cpuReplay.target)
	return r, nil
}

// watcher reads the target until a step shows there.
type watcher struct {
	coll    *mongo.Collection
	exited  <-chan struct{}
	timeout time.Duration
}

var errToolExited = errors.New("the tool's process exited")

// tick waits for the next poll; it fails when the tool exited or the
// step took longer than the timeout.
func (w watcher) tick(ctx context.Context, next <-chan time.Time, deadline <-chan time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.exited:
		return errToolExited
	case <-deadline:
		return fmt.Errorf("not on the target within --timeout %s", w.timeout)
	case <-next:
		return nil
	}
}

// countAtLeast returns when the target collection holds at least n
// documents; seen (when not nil) is called with every count read.
func (w watcher) countAtLeast(ctx context.Context, n int64, seen func(int64, time.Time)) (time.Time, error) {
	deadline := time.After(w.timeout)
	var first countAt // the first count above zero
	for {
		wait := pollEvery
		got, err := w.count(ctx)
		at := time.Now()
		if err == nil {
			if seen != nil {
				seen(got, at)
			}
			if got >= n {
				return at, nil
			}
			if first.at.IsZero() && got > 0 {
				first = countAt{got, at}
			}
			wait = pollDelay(first, countAt{got, at}, n)
		}
		if err := w.tick(ctx, time.After(wait), deadline); err != nil {
			return time.Time{}, err
		}
	}
}

// countAt is a count read on the target and when.
type countAt struct {
	n  int64
	at time.Time
}

// pollDelay is how long to wait before the next count, given the first
// count above zero (none yet: pollEvery) and the last one (pollMax while
// it is still the first's): a quarter of the time the rate since the first
// needs to reach n, at least pollEvery and at most pollMax. The count
// reaching n is then seen within about pollEvery of it, while in between
// the target is read about once a second.
func pollDelay(first, last countAt, n int64) time.Duration {
	if first.at.IsZero() {
		return pollEvery
	}
	if last.n <= first.n {
		return pollMax
	}
	rate := float64(last.n-first.n) / last.at.Sub(first.at).Seconds()
	left := time.Duration(float64(n-last.n) / rate / 4 * float64(time.Second))
	return min(max(left, pollEvery), pollMax)
}

// count is the target collection's document count from collStats:
// FerretDB answers it from its storage's row count, while a count
// command decodes every document (4 minutes for 50,000 documents on a
// busy machine, against about a second for collStats), which would slow
// the target it measures.
func (w watcher) count(ctx context.Context) (int64, error) {
	raw, err := w.coll.Database().RunCommand(ctx, bson.D{{Key: "collStats", Value: w.coll.Name()}}).Raw()
	if err != nil {
		return 0, err
	}
	v, err := raw.LookupErr("count")
	if err != nil {
		return 0, fmt.Errorf("collStats of %s: no count", w.coll.Name())
	}
	n, ok := v.AsInt64OK()
	if !ok {
		return 0, fmt.Errorf("collStats of %s: count is a %s", w.coll.Name(), v.Type)
	}
	return n, nil
}

// change is one live update or delete, still to show on the target.
type change struct {
	id      any
	deleted bool
	field0  string
}

// allVisible returns when every change shows on the target. A read by
// _id costs FerretDB v1 a scan of the collection in SQLite (about 0.2-0.4
// s on 50,000 documents of 1.1 KB), so each poll reads the changes in
// the order they were made and stops at the first not shown yet: one
// read a poll while the tool catches up, instead of one per change,
// which kept the target busy with the watcher's own reads. A change
// shown stays shown (nothing writes its document again).
func (w watcher) allVisible(ctx context.Context, pending []change) (time.Time, error) {
	tk := time.NewTicker(pollEvery)
	defer tk.Stop()
	deadline := time.After(w.timeout)
	for {
		for len(pending) > 0 {
			c := pending[0]
			var doc bson.Raw
			err := w.coll.FindOne(ctx, bson.D{{Key: "_id", Value: c.id}}).Decode(&doc)
			shown := c.deleted && errors.Is(err, mongo.ErrNoDocuments) ||
				!c.deleted && err == nil && doc.Lookup("field0").StringValue() == c.field0
			if !shown {
				break
			}
			pending = pending[1:]
		}
		if len(pending) == 0 {
			return time.Now(), nil
		}
		if err := w.tick(ctx, tk.C, deadline); err != nil {
			return time.Time{}, fmt.Errorf("%d changes not shown: %w", len(pending), err)
		}
	}
}

// liveInserts inserts n new documents (keys after the loaded ones) from 2
// clients, one document per insert.
func liveInserts(ctx context.Context, coll *mongo.Collection, o workload.Options, n int) error {
	next := make(chan int64)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for i := range int64(n) {
			select {
			case next <- o.RecordCount + i:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range 2 {
		g.Go(func() error {
			for k := range next {
				if _, err := coll.InsertOne(gctx, o.Document(k)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// updatesAndDeletes makes f.updates updates and f.deletes deletes of
// distinct loaded documents, shuffled, from one client; it returns when the
// source acknowledged the last one, and what the target must then show.
func updatesAndDeletes(ctx context.Context, coll *mongo.Collection, o workload.Options, f benchPeerFlags) (time.Time, []change, error) {
	var cs []change
	for i := range f.updates {
		cs = append(cs, change{id: o.KeyType.Key(int64(i)), field0: "live-" + strconv.Itoa(i)})
	}
	for i := range f.deletes {
		cs = append(cs, change{id: o.KeyType.Key(int64(f.updates + i)), deleted: true})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
	for _, c := range cs {
		var err error
		if c.deleted {
			_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: c.id}})
		} else {
			_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: c.id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "field0", Value: c.field0}}}})
		}
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("%v: %w", c.id, err)
		}
	}
	return time.Now(), cs, nil
}

// measureLive makes the live inserts, then the updates and deletes, and
// returns when the target showed the last of them and when the source
// acknowledged it; it sets r's insert rate.
func measureLive(ctx context.Context, out io.Writer, w watcher, src *mongo.Collection, o workload.Options, f benchPeerFlags, r *result) (visible, lastOp time.Time, err error) {
	t0 := time.Now()
	if err := liveInserts(ctx, src, o, f.inserts); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("live inserts: %w", err)
	}
	wrote := time.Now()
	all, err := w.countAtLeast(ctx, o.RecordCount+int64(f.inserts), nil)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("replay of the inserts: %w", err)
	}
	r.insertRate = measure.Div(float64(f.inserts), all.Sub(t0).Seconds())
	fmt.Fprintf(out, "inserts:   %d on the source in %.1fs, all on the target %.1fs after the first: %.1f ops/s (%s)\n",
		f.inserts, wrote.Sub(t0).Seconds(), all.Sub(t0).Seconds(), r.insertRate, loadAverage())

	lastOp, pending, err := updatesAndDeletes(ctx, src, o, f)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("live updates and deletes: %w", err)
	}
	visible, err = w.allVisible(ctx, pending)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("replay of the updates and deletes: %w", err)
	}
	return visible, lastOp, nil
}
