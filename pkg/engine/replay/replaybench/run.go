package replaybench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// Config is one replay run.
type Config struct {
	// Ops is the number of entries to replay; the pool's size when zero.
	Ops int64
	// Writers is threads.writers; BatchSize is cache.batchSize (writes per
	// bulk write); both take the task defaults when zero.
	Writers   int
	BatchSize int
	// ReadBatch is the entries per Next; DefaultReadBatch when zero.
	ReadBatch int
}

// Result is what one run measured.
type Result struct {
	// Ops are the entries replayed, Elapsed the time from the start of
	// Run until the sink had every write.
	Ops     int64
	Elapsed time.Duration
	// Mallocs and AllocBytes are the heap allocations of the whole process
	// during the run (runtime.MemStats deltas); GCs the collections.
	Mallocs, AllocBytes uint64
	GCs                 uint32
	Sink                SinkCounts
	// Commands are the commands the replayer counted (Status
	// WriteCommands), CommandWrites the writes they carried: the figure
	// /status and the metrics report as writes per command.
	Commands, CommandWrites int64
	// Writers and BatchSize are the values used.
	Writers, BatchSize int
}

// WritesPerCommand is the writes carried per command the replayer
// sent, as its Status reports it.
func (r Result) WritesPerCommand() float64 {
	if r.Commands == 0 {
		return 0
	}
	return float64(r.CommandWrites) / float64(r.Commands)
}

func (r *Result) addCommands(st replay.Status) {
	for k, n := range st.WriteCommands {
		r.Commands += n
		r.CommandWrites += st.WritesSent[k]
	}
}

// OpsPerSecond is the replay rate.
func (r Result) OpsPerSecond() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// NsPerOp is the wall time per entry.
func (r Result) NsPerOp() float64 { return float64(r.Elapsed.Nanoseconds()) / float64(r.Ops) }

// AllocsPerOp and BytesPerOp are the heap allocations per entry.
func (r Result) AllocsPerOp() float64 { return float64(r.Mallocs) / float64(r.Ops) }

// BytesPerOp is the bytes allocated per entry.
func (r Result) BytesPerOp() float64 { return float64(r.AllocBytes) / float64(r.Ops) }

// Run replays c.Ops entries of in through a new replay.Replayer (the real pipeline: parse,
// skip and filter, assemble, translate, partition, per-writer queues,
// writer batching, watermark) into a Sink, and stops it once the sink has
// every write. It checks that every write arrived and that the checkpoint
// reached the last entry.
func Run(ctx context.Context, in *Input, c Config) (Result, error) {
	spec := config.Spec{Threads: config.Threads{Writers: c.Writers}, Cache: config.Cache{BatchSize: c.BatchSize}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		return Result{}, err
	}
	ops := c.Ops
	if ops <= 0 {
		ops = int64(len(in.Entries))
	}
	want := in.Counts(ops)
	last := in.TS(ops - 1)
	sink := NewSink(want.Writes())
	res := Result{Ops: ops, Writers: spec.Threads.Writers, BatchSize: spec.Cache.BatchSize}
	r := replay.New(replay.Options{
		Task: "bench-replay", Spec: &spec, Reader: NewReader(in, ops, c.ReadBatch),
		Mapper: mapper, From: in.From, Apply: sink.Apply,
	})

	stop, err := runUntilApplied(ctx, []*replay.Replayer{r}, sink, want.Writes(), &res, "the replayer stopped")
	if err != nil {
		return res, err
	}
	if err := stop(); err != nil {
		return res, err
	}
	res.Sink = sink.Counts()
	res.addCommands(r.Status())
	s := res.Sink
	switch {
	case res.Commands != s.Batches || res.CommandWrites != s.Writes:
		return res, fmt.Errorf("the replayer counted %d commands of %d writes, the sink saw %d of %d", res.Commands, res.CommandWrites, s.Batches, s.Writes)
	case s.Writes != want.Writes():
		return res, fmt.Errorf("the sink saw %d writes, want %d", s.Writes, want.Writes())
	case s.Inserts != want.Inserts || s.Replaces != 0 || s.Updates != want.Updates || s.Deletes != want.Deletes:
		return res, fmt.Errorf("the sink saw %d inserts, %d replaces, %d updates, %d deletes; want %d, 0, %d, %d",
			s.Inserts, s.Replaces, s.Updates, s.Deletes, want.Inserts, want.Updates, want.Deletes)
	}
	if cp := r.Checkpoint(); cp != last {
		return res, fmt.Errorf("the checkpoint is %d.%d after the run, want the last entry's %d.%d", cp.T, cp.I, last.T, last.I)
	}
	return res, nil
}

// runUntilApplied runs the replayers until the sink has want writes, and
// records the wall time, heap allocations and garbage collections in
// between in res: the timed part of a round. stop cancels the replayers,
// waits for them and returns the first error other than the cancellation.
// When a replayer ends first, the error says so (stopped when it ended
// without one).
func runUntilApplied(ctx context.Context, rs []*replay.Replayer, sink *Sink, want int64, res *Result, stopped string) (stop func() error, err error) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, len(rs))
	start := time.Now()
	for _, r := range rs {
		go func() { errc <- r.Run(ctx) }()
	}
	select {
	case <-sink.Done():
		res.Elapsed = time.Since(start)
	case err := <-errc:
		cancel()
		if err == nil {
			err = errors.New(stopped)
		}
		return nil, fmt.Errorf("replay ended before every write was applied (%d of %d): %w", sink.Counts().Writes, want, err)
	}
	runtime.ReadMemStats(&after)
	res.Mallocs, res.AllocBytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	res.GCs = after.NumGC - before.NumGC
	return func() error {
		cancel()
		var first error
		for range rs {
			if err := <-errc; err != nil && !errors.Is(err, context.Canceled) && first == nil {
				first = fmt.Errorf("replay: %w", err)
			}
		}
		return first
	}, nil
}
