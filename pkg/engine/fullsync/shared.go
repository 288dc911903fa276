package fullsync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
)

// A replica-set source's copy shared with copy-only workers
// (fullSync.workers above 1; docs/architecture.md, "The full copy"). The
// task's run prepares and plans every collection as before; then it and
// every copy-only worker claim the planned _id ranges through leases on
// the target (rangelease), so that each range is read by one worker at a
// time and recorded done once, and a killed worker's range is taken over
// once its lease has gone unrenewed for the TTL. The task's run records
// each range done in its checkpoint as the leases say, and ends the copy
// once every range is done, by whichever worker.

// sharedPoll is how often a worker with nothing to claim looks again:
// another worker's range may be taken over, a new plan saved, or the
// copy recorded done.
const sharedPoll = time.Second

// waitLogEvery is how often a process with nothing left to claim logs the
// ranges it waits for, and who holds them.
const waitLogEvery = 10 * time.Second

// recordEvery is how often the task's run records the ranges other
// workers finished while it copies.
const recordEvery = 5 * time.Second

// shared copies ranges claimed through leases.
type shared struct {
	c      *Copier
	leaser *rangelease.Leaser
	// counted are the ranges already counted in the progress; marked,
	// those recorded done in the checkpoint.
	mu              sync.Mutex
	counted, marked map[string]bool
	// primed is set once a helper has counted the ranges done before it
	// started (as earlier, not in its rate).
	primed bool
	// limiter is this process's share of rateLimit (fullSync.workers
	// processes copy at once).
	limiter *rate.Limiter
}

func (c *Copier) newShared() *shared {
	return &shared{c: c, leaser: c.opts.Leaser, counted: map[string]bool{}, marked: map[string]bool{},
		limiter: Limiter(c.opts.Spec, c.opts.Processes)}
}

// copyShared copies the ranges still to copy with the copy-only workers
// (the task's own run): it returns once every range is recorded done.
func (c *Copier) copyShared(ctx context.Context, todo []checkpoint.Range, byNS map[string]catalog.Collection) error {
	if len(todo) == 0 {
		return nil
	}
	c.progress.setStage("copying (ranges shared with other processes)")
	// Every process marks a range started when it claims it (copier's
	// Claimed), before anything of it is written: a later run without
	// leases (fullSync.workers lowered to 1) clears such a range before
	// copying it, as a range it started itself.
	s := c.newShared()
	// The ranges other workers finish reach the progress and the
	// checkpoint as they finish, not only once this process finds nothing
	// left to claim.
	rctx, stopRecording := context.WithCancel(ctx)
	defer stopRecording()
	go func() {
		t := time.NewTicker(recordEvery)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, err := s.record(rctx, todo, true); err != nil && rctx.Err() == nil {
					c.log.Warn("could not read the ranges other workers finished; retrying", "err", err)
				}
			}
		}
	}()
	var waitLogged time.Time
	for {
		if err := s.sweep(ctx, todo, byNS); err != nil {
			return err
		}
		open, err := s.record(ctx, todo, true)
		if err != nil || open == 0 {
			return err
		}
		if time.Since(waitLogged) >= waitLogEvery {
			s.logHolders(ctx, todo, "the task's run: every range it can claim is copied; waiting for the ranges other processes hold")
			waitLogged = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sharedPoll):
		}
	}
}

// HelpCopy copies, for a process that does not lead the copy (a
// copy-only worker, a worker of a sharded source's shard), the planned
// ranges it can claim, until none is left to claim; it returns how many
// ranges are not done yet. The task's run plans, prepares the target
// collections and records the copy done; a helper only reads and writes
// ranges of collections already planned.
func (c *Copier) HelpCopy(ctx context.Context) (int, error) {
	if c.opts.Leaser == nil {
		return 0, fmt.Errorf("fullsync: no range leases: the copy is not shared (fullSync.workers 1)")
	}
	plans, err := c.opts.Store.Plans(ctx)
	if err != nil {
		return 0, err
	}
	ranges, err := c.opts.Store.Ranges(ctx)
	if err != nil {
		return 0, err
	}
	if c.helper == nil {
		c.helper = c.newShared()
	}
	s := c.helper
	byNS := map[string]catalog.Collection{}
	var todo []checkpoint.Range
	for _, r := range ranges {
		p, ok := plans[r.NS]
		if !ok || p.PerShard {
			continue
		}
		if _, ok := byNS[r.NS]; !ok {
			src := catalog.ParseNamespace(r.NS)
			filter, err := c.mapper.Filter(src)
			if err != nil {
				return 0, err
			}
			byNS[r.NS] = catalog.Collection{Source: src, Target: c.mapper.Target(src), Type: "collection", Filter: filter}
			// The task's figures: the plan's estimate and every range,
			// whoever copies it (a shard worker's are summed by the
			// operator instead: OthersReport).
			est := p.Estimated
			if c.opts.OthersReport {
				est = 0
			}
			c.progress.ensureNamespace(r.NS, byNS[r.NS].Target.String(), est, p.Ranges)
		}
		if r.State == checkpoint.RangeDone {
			docs, bytes := r.Docs, r.Bytes
			if c.opts.OthersReport {
				docs, bytes = 0, 0
			}
			s.count(r.NS, r.ID, docs, bytes, earlier)
			continue
		}
		todo = append(todo, r)
	}
	if len(todo) == 0 {
		return 0, nil
	}
	c.progress.startOnce()
	c.progress.setStage("copying ranges of the task's plan")
	if !s.primed {
		// Ranges already done when this process starts are the task's,
		// not part of this run's rate.
		if _, err := s.record(ctx, todo, false); err != nil {
			return 0, err
		}
	}
	if err := s.sweep(ctx, todo, byNS); err != nil {
		return 0, err
	}
	open, err := s.record(ctx, todo, false)
	if err == nil && open > 0 && time.Since(c.waitLogged) >= waitLogEvery {
		s.logHolders(ctx, todo, "nothing left to claim; waiting for the ranges other processes hold")
		c.waitLogged = time.Now()
	}
	return open, err
}

// HelpDone ends a helper's copy once the task's run recorded it done:
// the ranges other processes finished since the helper last looked are
// counted, so that its last figures are the task's whole copy.
func (c *Copier) HelpDone(ctx context.Context) error {
	if c.helper != nil {
		if _, err := c.HelpCopy(ctx); err != nil {
			return err
		}
	}
	c.progress.setStage("done")
	return nil
}

// sweep runs threads.readers copiers, each claiming and copying ranges of
// every collection in turn until none can be claimed.
func (s *shared) sweep(ctx context.Context, todo []checkpoint.Range, byNS map[string]catalog.Collection) error {
	c := s.c
	var order []string
	groups := map[string][]sourceshardcopy.Range{}
	for _, r := range todo {
		if _, ok := groups[r.NS]; !ok {
			order = append(order, r.NS)
		}
		groups[r.NS] = append(groups[r.NS], sourceshardcopy.Range{ID: r.ID, Filter: r.Filter})
	}
	copiers := make(map[string]*sourceshardcopy.Copier, len(order))
	for _, ns := range order {
		copiers[ns] = s.copier(byNS[ns])
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := range max(1, c.opts.Spec.Threads.Readers) {
		g.Go(func() error {
			// Copiers start at different collections, so that small
			// collections do not queue behind one large one.
			for k := range order {
				ns := order[(k+i)%len(order)]
				if _, err := copiers[ns].CopyClaimable(gctx, nil, groups[ns]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// copier copies coll's ranges claimed through leases, reading the source
// at majority and overwriting what an earlier attempt wrote.
func (s *shared) copier(coll catalog.Collection) *sourceshardcopy.Copier {
	c := s.c
	ns := coll.Source.String()
	return &sourceshardcopy.Copier{
		Source: c.opts.Source, NS: ns,
		Target: c.opts.Target.Database(coll.Target.DB).Collection(coll.Target.Coll),
		Leaser: s.leaser, Writer: c.writer,
		BatchDocs: c.opts.Spec.Cache.BatchSize, BatchBytes: sourceshardcopy.BatchBytes(c.maxBytes, c.opts.Spec.Threads.Readers),
		Conflict: c.opts.Spec.FullSync.OnConflict, Limiter: s.limiter, ObserveWrite: c.opts.ObserveWrite,
		// Marked started on its claim, by whichever process claims it,
		// so that a range holding documents is never pending: a later
		// run without leases clears it before it copies it again.
		Claimed: func(ctx context.Context, r sourceshardcopy.Range) error {
			return c.opts.Store.MarkStartedMany(ctx, []string{r.ID})
		},
		Written: func(docs, bytes int64) {
			c.progress.batchWritten(ns, docs, bytes, sink.Result{})
			if c.opts.Hook != nil {
				c.opts.Hook(docs)
			}
		},
		Finished: func(r sourceshardcopy.Range, docs, bytes int64) {
			s.count(ns, r.ID, docs, bytes, own)
		},
	}
}

// record reads the done records of todo's ranges, counts those other
// processes finished in the progress (their documents and bytes, so that
// every process shows the task's figures, next to its own share), and
// returns how many are not done. In the task's run (mark) it also records
// every done range in the checkpoint.
func (s *shared) record(ctx context.Context, todo []checkpoint.Range, mark bool) (int, error) {
	done, err := s.leaser.Done(ctx)
	if err != nil {
		return 0, err
	}
	how := other
	s.mu.Lock()
	if !mark && !s.primed {
		how, s.primed = earlier, true
	}
	s.mu.Unlock()
	open := 0
	for _, r := range todo {
		rec, ok := done[r.ID]
		if !ok {
			open++
			continue
		}
		docs, bytes := rec.Docs, rec.Bytes
		if s.c.opts.OthersReport {
			docs, bytes = 0, 0
		}
		s.count(r.NS, r.ID, docs, bytes, how)
		if !mark {
			continue
		}
		if r.State == checkpoint.RangeDone {
			continue
		}
		s.mu.Lock()
		marked := s.marked[r.ID]
		s.mu.Unlock()
		if marked {
			continue
		}
		if err := s.c.opts.Store.MarkDone(ctx, r.ID, rec.Docs, rec.Bytes); err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.marked[r.ID] = true
		s.mu.Unlock()
	}
	return open, nil
}

// logHolders logs msg with the ranges of todo not done yet and who holds
// each: what a process with nothing left to claim waits for. A holder
// that goes silent for the lease's TTL loses its range to the next claim.
func (s *shared) logHolders(ctx context.Context, todo []checkpoint.Range, msg string) {
	ids := make([]string, len(todo))
	for i, r := range todo {
		ids[i] = r.ID
	}
	held, err := s.leaser.Held(ctx, ids)
	if err != nil {
		s.c.log.Warn("could not read the range leases", "err", err)
		return
	}
	names := make([]string, len(held))
	for i, h := range held {
		names[i] = h.String()
	}
	s.c.log.Info(msg, "rangesNotDone", len(held), "held", strings.Join(names, "; "))
}

// doneBy says who finished a range, for the progress.
type doneBy int

const (
	own     doneBy = iota // this process, in this run
	other                 // another process, during this run
	earlier               // before this process started copying
)

// count counts a done range in the progress once.
func (s *shared) count(ns, id string, docs, bytes int64, by doneBy) {
	s.mu.Lock()
	seen := s.counted[id]
	s.counted[id] = true
	s.mu.Unlock()
	switch {
	case seen:
	case by == other:
		s.c.progress.otherDone(ns, docs, bytes)
	default:
		s.c.progress.rangeDone(ns, docs, bytes, by == earlier)
	}
}
