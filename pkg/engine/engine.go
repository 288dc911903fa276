// Package engine runs one sync task: Engine connects to both deployments,
// then walks the task's phases (Pending, FullSync, Verifying, Completed or
// Failed) in one state machine, composing the full copy (fullsync) and the
// verification (verify); Status is a value snapshot for /status, metrics
// and progress output. It never imports Kubernetes packages.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// Phase is where a task is; the names are the SyncTask status phases.
type Phase string

// Phases.
const (
	PhasePending   Phase = "Pending"
	PhaseFullSync  Phase = "FullSync"
	PhaseStreaming Phase = "Streaming"
	PhaseVerifying Phase = "Verifying"
	PhaseCompleted Phase = "Completed"
	PhaseFailed    Phase = "Failed"
)

// ErrVerificationFailed is returned when the target differs from the
// source after the copy.
var ErrVerificationFailed = errors.New("verification found differences")

// ErrModeNotSupported is returned for modes this build cannot run yet.
var ErrModeNotSupported = errors.New("mode not supported")

// Options tune an Engine.
type Options struct {
	Log *slog.Logger
	// ObserveWrite is told the duration of every write batch.
	ObserveWrite func(time.Duration)
	// CopyHook is called after each copy batch (tests).
	CopyHook func(docs int64)
}

// Engine runs one task.
type Engine struct {
	task           *config.Task
	opts           Options
	log            *slog.Logger
	source, target *mongo.Client
	store          *checkpoint.Store
	copier         *fullsync.Copier

	mu         sync.Mutex
	phase      Phase
	err        error
	verifyRes  *verify.Report
	verifyProg verifyProgress
	started    time.Time
	finished   time.Time
}

type verifyProgress struct {
	NS          string
	Done, Total int64
}

// Open connects to the task's source and target and checks that they are
// two different deployments. Nothing is written anywhere.
func Open(ctx context.Context, task *config.Task, opts Options) (*Engine, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{task: task, opts: opts, log: log.With("task", task.Name), phase: PhasePending}
	var err error
	if e.source, err = conn.Open(ctx, "source", task.Source, conn.Options{AppName: "mongoferry"}); err != nil {
		return nil, err
	}
	if e.target, err = conn.Open(ctx, "target", task.Target, conn.Options{AppName: "mongoferry"}); err != nil {
		e.Close()
		return nil, err
	}
	if err := conn.CheckDistinct(ctx, e.source, e.target); err != nil {
		e.Close()
		return nil, err
	}
	e.store = checkpoint.NewStore(e.target, task.Checkpoint.Database, task.Name)
	e.copier, err = fullsync.New(fullsync.Options{
		Task: task.Name, Spec: &task.Spec, Source: e.source, Target: e.target, Store: e.store,
		Log: log, ObserveWrite: opts.ObserveWrite, Hook: opts.CopyHook,
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close disconnects from both deployments.
func (e *Engine) Close() {
	for _, c := range []*mongo.Client{e.source, e.target} {
		if c != nil {
			_ = c.Disconnect(context.Background())
		}
	}
}

// Source and Target return the connected clients.
func (e *Engine) Source() *mongo.Client { return e.source }

// Target returns the target client.
func (e *Engine) Target() *mongo.Client { return e.target }

// Run walks the task's phases until it completes, fails or ctx ends. A
// restarted task resumes from its checkpoint: the same path as a first
// start.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	e.started = time.Now()
	e.mu.Unlock()
	err := e.run(ctx)
	e.mu.Lock()
	e.finished = time.Now()
	if err != nil && ctx.Err() == nil {
		e.phase, e.err = PhaseFailed, err
	}
	e.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		_ = e.store.SetPhase(context.Background(), string(PhaseFailed), false)
	}
	return err
}

func (e *Engine) run(ctx context.Context) error {
	spec := &e.task.Spec
	if spec.Mode != config.ModeFull {
		return fmt.Errorf("mode: %w: %q needs oplog replay, which this build does not have yet; use mode: full", ErrModeNotSupported, spec.Mode)
	}
	rec, err := e.store.Start(ctx)
	if err != nil {
		return err
	}
	next := PhaseFullSync
	if rec.CopyDone {
		next = PhaseVerifying
	}
	for {
		e.setPhase(next)
		if next != PhaseCompleted {
			if err := e.store.SetPhase(ctx, string(next), false); err != nil {
				return err
			}
		}
		e.log.Info("phase", "phase", next)
		switch next {
		case PhaseFullSync:
			if err := e.copier.Run(ctx); err != nil {
				return err
			}
			if err := e.store.SetPhase(ctx, string(PhaseVerifying), true); err != nil {
				return err
			}
			next = PhaseVerifying
		case PhaseVerifying:
			if spec.Verify.Mode != config.VerifyNone {
				if err := e.verify(ctx); err != nil {
					return err
				}
			}
			next = PhaseCompleted
		case PhaseCompleted:
			return e.store.SetPhase(ctx, string(PhaseCompleted), true)
		default:
			return fmt.Errorf("engine: no transition from phase %s", next)
		}
	}
}

func (e *Engine) verify(ctx context.Context) error {
	spec := &e.task.Spec
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		return err
	}
	colls, err := catalog.List(ctx, e.source, mapper)
	if err != nil {
		return err
	}
	rep, err := verify.Run(ctx, e.source, e.target, colls, verify.Options{
		Mode: spec.Verify.Mode, SampleSize: spec.Verify.SampleSize,
		Progress: func(ns string, done, total int64) {
			e.mu.Lock()
			e.verifyProg = verifyProgress{NS: ns, Done: done, Total: total}
			e.mu.Unlock()
		},
	})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	e.mu.Lock()
	e.verifyRes = rep
	e.mu.Unlock()
	if !rep.OK() {
		return fmt.Errorf("%w: see the verification report", ErrVerificationFailed)
	}
	return nil
}

func (e *Engine) setPhase(p Phase) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.phase = p
}

// VerifyReport returns the last verification report, or nil.
func (e *Engine) VerifyReport() *verify.Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.verifyRes
}
