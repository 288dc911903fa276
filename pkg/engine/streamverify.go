package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// ErrNotStreaming is returned for a streaming verification asked of a
// task that is not replaying, or of a worker that replays one shard only
// (the other shards' positions are not its to judge).
var ErrNotStreaming = errors.New("streaming verification needs a task that is streaming in this process")

// streamer returns the task's streaming verifier, made on first use.
// Called with v.mu held.
func (v *verification) streamer() *verify.Streamer {
	if v.sv == nil {
		vs := &v.task.Verify
		budget, err := vs.MaxPendingBytes.Bytes()
		if err != nil || budget <= 0 {
			budget, _ = config.DefaultMaxPendingBytes.Bytes()
		}
		v.sv = verify.NewStreamer(v.source, v.target, verify.StreamOptions{
			Positions: v.positions, Rechecks: vs.Rechecks, MaxPendingBytes: budget,
			Batch: v.task.Cache.BatchSize,
		})
	}
	return v.sv
}

// StreamVerifyStatus returns the streaming verifier's progress and
// findings, or nil when no pass ran.
func (e *Engine) StreamVerifyStatus() *verify.StreamStatus { return e.verification.streamStatus() }

// streamStatus is StreamVerifyStatus.
func (v *verification) streamStatus() *verify.StreamStatus {
	v.mu.Lock()
	sv := v.sv
	v.mu.Unlock()
	if sv == nil {
		return nil
	}
	s := sv.Status()
	if !s.Running && s.Passes == 0 {
		return nil
	}
	return &s
}

// VerifyStreaming runs one streaming verification pass now, while replay
// runs, and returns its outcome. It fails with ErrNotStreaming when the
// task is not replaying in this process and with verify.ErrPassRunning
// while another pass runs.
func (e *Engine) VerifyStreaming(ctx context.Context) (verify.StreamStatus, error) {
	return e.verification.pass(ctx)
}

// pass is VerifyStreaming.
func (v *verification) pass(ctx context.Context) (verify.StreamStatus, error) {
	colls, run, err := v.reservePass(ctx)
	if err != nil {
		return verify.StreamStatus{}, err
	}
	return v.runPass(ctx, colls, run)
}

// reservePass lists the task's collections and takes the streaming
// verifier for one pass over them (see verify.Streamer.Reserve).
func (v *verification) reservePass(ctx context.Context) ([]catalog.Collection, func(context.Context, []catalog.Collection) (verify.StreamStatus, error), error) {
	if v.partial || v.replayStatus() == nil {
		return nil, nil, ErrNotStreaming
	}
	colls, err := catalog.List(ctx, v.source, v.mapper)
	if err != nil {
		return nil, nil, err
	}
	v.mu.Lock()
	sv := v.streamer()
	v.mu.Unlock()
	run, err := sv.Reserve()
	return colls, run, err
}

// runPass runs a reserved pass and logs its outcome.
func (v *verification) runPass(ctx context.Context, colls []catalog.Collection, run func(context.Context, []catalog.Collection) (verify.StreamStatus, error)) (verify.StreamStatus, error) {
	st, err := run(ctx, colls)
	switch {
	case err == nil && !st.OK:
		v.log.Warn("streaming verification: the target differs", "persisting", st.Persisting, "notRechecked", st.NotRechecked, "unsettled", st.Unsettled)
	case err == nil:
		v.log.Info("streaming verification: the target matches", "documents", st.Compared, "resolved", st.Resolved)
	}
	return st, err
}

// StartVerifyStreaming starts a streaming verification pass in the
// background (POST /verify on a worker); the pass ends with the replay.
// The pass is reserved before it returns: nil means it runs, and a second
// call before it ends fails with verify.ErrPassRunning.
func (e *Engine) StartVerifyStreaming() error { return e.verification.startPass() }

// startPass is StartVerifyStreaming.
func (v *verification) startPass() error {
	v.mu.Lock()
	ctx := v.svCtx
	v.mu.Unlock()
	if ctx == nil || v.partial {
		return ErrNotStreaming
	}
	colls, run, err := v.reservePass(ctx)
	if err != nil {
		return err
	}
	go func() {
		if _, err := v.runPass(ctx, colls, run); err != nil && ctx.Err() == nil {
			v.log.Warn("streaming verification stopped", "error", err)
		}
	}()
	return nil
}

// whileStreaming serves streaming verification for the replay that
// runs under ctx: on demand (StartVerifyStreaming) and, with
// verify.continuous, a pass every verify.intervalSeconds after the last.
// It returns when ctx ends.
func (v *verification) whileStreaming(ctx context.Context) {
	if v.partial {
		return
	}
	v.mu.Lock()
	v.svCtx = ctx
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		v.svCtx = nil
		v.mu.Unlock()
	}()
	if !v.task.Verify.Continuous {
		<-ctx.Done()
		return
	}
	rest := time.Duration(max(v.task.Verify.IntervalSeconds, 1)) * time.Second
	for ctx.Err() == nil {
		if _, err := v.pass(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, verify.ErrPassRunning) {
			v.log.Warn("streaming verification stopped; the next pass starts after the rest", "error", err, "rest", rest)
		}
		select {
		case <-ctx.Done():
		case <-time.After(rest):
		}
	}
}

// replayPositions answers the streaming verifier from the source's clock
// and the engine's replay. The replay's state is read at most every
// statusReuse: a pass asks about every pending position after each batch.
type replayPositions struct {
	source *mongo.Client
	// replayStatus returns the replay's status, nil while replay does not
	// run; tailer the oplog tailer it reads, nil while none does.
	replayStatus func() *replay.Status
	tailer       func() *source.Tailer
	// scripted says a scripted reader (Options.Reader) replaces the tailer.
	scripted bool

	mu     sync.Mutex
	readAt time.Time
	replay *replay.Status
	fresh  time.Time // when the reader's newest position was last read
}

// statusReuse is how long replayPositions reuses a replay status.
const statusReuse = 200 * time.Millisecond

// Now implements verify.Positions (verify.SourceNow).
func (p *replayPositions) Now(ctx context.Context) (verify.Position, error) {
	return verify.SourceNow(ctx, p.source)
}

// Passed reports whether replay's applied position is at or past pos, or
// replay is caught up with a newest source position read after pos was
// taken (an idle source writes nothing that would move it past pos).
func (p *replayPositions) Passed(_ context.Context, pos verify.Position) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.readAt) >= statusReuse {
		p.readAt, p.replay = now, p.replayStatus()
		switch t := p.tailer(); {
		case p.scripted:
			p.fresh = now // a scripted reader knows every entry it has
		case t != nil:
			p.fresh = t.NewestReadAt()
		default:
			p.fresh = time.Time{}
		}
	}
	r := p.replay
	if r == nil {
		return false, nil
	}
	if r.AppliedTS.Compare(pos.TS) >= 0 {
		return true, nil
	}
	return r.CaughtUp() && !p.fresh.IsZero() && !p.fresh.Before(pos.At), nil
}
