package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// ErrNotStreaming is returned for a streaming verification asked of a
// task that is not replaying, or of a worker that replays one shard only
// (the other shards' positions are not its to judge).
var ErrNotStreaming = errors.New("streaming verification needs a task that is streaming in this process")

// streamer returns the task's streaming verifier, made on first use.
// Called with e.mu held.
func (e *Engine) streamer() *verify.Streamer {
	if e.sv == nil {
		v := &e.task.Verify
		budget, err := v.MaxPendingBytes.Bytes()
		if err != nil || budget <= 0 {
			budget, _ = config.DefaultMaxPendingBytes.Bytes()
		}
		e.sv = verify.NewStreamer(e.source, e.target, verify.StreamOptions{
			Positions: &replayPositions{e: e}, Rechecks: v.Rechecks, MaxPendingBytes: budget,
			Batch: e.task.Cache.BatchSize,
		})
	}
	return e.sv
}

// StreamVerifyStatus returns the streaming verifier's progress and
// findings, or nil when no pass ran.
func (e *Engine) StreamVerifyStatus() *verify.StreamStatus {
	e.mu.Lock()
	sv := e.sv
	e.mu.Unlock()
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
	colls, run, err := e.reservePass(ctx)
	if err != nil {
		return verify.StreamStatus{}, err
	}
	return e.runPass(ctx, colls, run)
}

// reservePass lists the task's collections and takes the streaming
// verifier for one pass over them (see verify.Streamer.Reserve).
func (e *Engine) reservePass(ctx context.Context) ([]catalog.Collection, func(context.Context, []catalog.Collection) (verify.StreamStatus, error), error) {
	if e.streaming.partial() || e.Status().Replay == nil {
		return nil, nil, ErrNotStreaming
	}
	colls, err := catalog.List(ctx, e.source, e.mapper)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	sv := e.streamer()
	e.mu.Unlock()
	run, err := sv.Reserve()
	return colls, run, err
}

// runPass runs a reserved pass and logs its outcome.
func (e *Engine) runPass(ctx context.Context, colls []catalog.Collection, run func(context.Context, []catalog.Collection) (verify.StreamStatus, error)) (verify.StreamStatus, error) {
	st, err := run(ctx, colls)
	switch {
	case err == nil && !st.OK:
		e.log.Warn("streaming verification: the target differs", "persisting", st.Persisting, "notRechecked", st.NotRechecked, "unsettled", st.Unsettled)
	case err == nil:
		e.log.Info("streaming verification: the target matches", "documents", st.Compared, "resolved", st.Resolved)
	}
	return st, err
}

// StartVerifyStreaming starts a streaming verification pass in the
// background (POST /verify on a worker); the pass ends with the replay.
// The pass is reserved before it returns: nil means it runs, and a second
// call before it ends fails with verify.ErrPassRunning.
func (e *Engine) StartVerifyStreaming() error {
	e.mu.Lock()
	ctx := e.svCtx
	e.mu.Unlock()
	if ctx == nil || e.streaming.partial() {
		return ErrNotStreaming
	}
	colls, run, err := e.reservePass(ctx)
	if err != nil {
		return err
	}
	go func() {
		if _, err := e.runPass(ctx, colls, run); err != nil && ctx.Err() == nil {
			e.log.Warn("streaming verification stopped", "error", err)
		}
	}()
	return nil
}

// verifyWhileStreaming serves streaming verification for the replay that
// runs under ctx: on demand (StartVerifyStreaming) and, with
// verify.continuous, a pass every verify.intervalSeconds after the last.
// It returns when ctx ends.
func (e *Engine) verifyWhileStreaming(ctx context.Context) {
	if e.streaming.partial() {
		return
	}
	e.mu.Lock()
	e.svCtx = ctx
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.svCtx = nil
		e.mu.Unlock()
	}()
	if !e.task.Verify.Continuous {
		<-ctx.Done()
		return
	}
	rest := time.Duration(max(e.task.Verify.IntervalSeconds, 1)) * time.Second
	for ctx.Err() == nil {
		if _, err := e.VerifyStreaming(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, verify.ErrPassRunning) {
			e.log.Warn("streaming verification stopped; the next pass starts after the rest", "error", err, "rest", rest)
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
	e *Engine

	mu     sync.Mutex
	readAt time.Time
	replay *replay.Status
	fresh  time.Time // when the reader's newest position was last read
}

// statusReuse is how long replayPositions reuses a replay status.
const statusReuse = 200 * time.Millisecond

// Now implements verify.Positions (verify.SourceNow).
func (p *replayPositions) Now(ctx context.Context) (verify.Position, error) {
	return verify.SourceNow(ctx, p.e.source)
}

// Passed reports whether replay's applied position is at or past pos, or
// replay is caught up with a newest source position read after pos was
// taken (an idle source writes nothing that would move it past pos).
func (p *replayPositions) Passed(_ context.Context, pos verify.Position) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.readAt) >= statusReuse {
		p.readAt, p.replay = now, p.e.Status().Replay
		switch t := p.e.tailer.Load(); {
		case p.e.opts.Reader != nil:
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
