package replay

import (
	"context"
	"sync"
)

// gate decides when the writers' batches go to the target, and combines
// them into fuller commands (Nagle's rule for commands): a batch goes at
// once while fewer than limit commands are in flight, or when the batches
// waiting add up to a full command (full writes); otherwise it waits, and
// the next command to go takes the batches waiting, from any writer, up
// to full writes. Under a light load nothing is in flight and a batch
// goes at once; under a heavy one, commands carry what arrived while the
// previous ones were in flight, so there are fewer and fuller of them.
//
// Order. Each writer has at most one batch in the gate: it submits its
// batch and waits until that batch is applied before it takes the next
// from its queue. Every write of a document (and every write of a
// namespace with a unique secondary index, see bucket) is on one
// writer's queue, so writes of one document are never in two commands
// in flight, and within a command the planner keeps each document's
// writes in queue order (writes of different documents commute). A
// write is marked done in the watermark only once its command is
// acknowledged (writer.finish), so the checkpoint never passes a write
// still waiting here.
//
// Who sends. The writer whose submission opens the gate sends the
// command, with the batches it takes; when a command ends and batches
// wait that may now go, its sender hands them to the writer of the
// oldest of them (a lead), which sends them, and goes back to its own
// queue.
type gate struct {
	limit, full int

	mu            sync.Mutex
	inflight      int    // commands being sent
	waiting       []*lot // batches submitted and not yet taken, oldest first
	waitingWrites int
}

// lot is one writer's batch in the gate; each writer owns one.
type lot struct {
	items []item
	// signal carries the lot's outcome, or a lead: batches to send,
	// this lot among them. A lot receives at most one message at a time.
	signal chan lotSignal
}

type lotSignal struct {
	err  error
	lead []*lot
}

// commandsInFlight is the gate's limit: how many commands may be in
// flight before a batch that does not fill a command waits to join
// others. Where a batch goes as one bulkWrite command, one: commands are
// fullest, and full ones go whatever the limit, so it bounds no
// throughput. Elsewhere a batch goes as one command per namespace and
// kind, one after the other, so combined batches make no fuller
// commands, only longer waits: one per writer, as if there were no gate.
func (r *Replayer) commandsInFlight() int {
	if r.bulkWrite != nil {
		return 1
	}
	return r.o.Spec.Threads.Writers
}

func newGate(limit, full int) *gate {
	return &gate{limit: max(limit, 1), full: max(full, 1)}
}

// submit has l's batch applied, sending it itself or waiting for another
// writer's command to carry it, and returns once it is applied (or has
// failed). send applies a take: the writes of its lots.
func (g *gate) submit(ctx context.Context, l *lot, send func(take []*lot) error) error {
	g.mu.Lock()
	g.waiting = append(g.waiting, l)
	g.waitingWrites += len(l.items)
	take, more := g.ready()
	g.mu.Unlock()
	lead(more)
	for {
		if take != nil {
			if err := g.send(take, send); err != nil {
				return err
			}
			take = nil
		}
		select {
		case s := <-l.signal:
			if s.lead != nil {
				take = s.lead
				continue
			}
			return s.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// send applies take, tells its lots the outcome and hands what may go
// next to the writers of the oldest batches waiting.
func (g *gate) send(take []*lot, send func(take []*lot) error) error {
	err := send(take)
	g.mu.Lock()
	g.inflight--
	first, more := g.ready()
	g.mu.Unlock()
	for _, l := range take {
		l.signal <- lotSignal{err: err}
	}
	if first != nil {
		more = append(more, first)
	}
	lead(more)
	return err
}

// lead hands each take to the writer of its first lot, to send.
func lead(takes [][]*lot) {
	for _, t := range takes {
		t[0].signal <- lotSignal{lead: t}
	}
}

// ready takes what may go now: the first take, and the further full
// ones. g.mu is held.
func (g *gate) ready() (first []*lot, more [][]*lot) {
	first = g.next()
	if first == nil {
		return nil, nil
	}
	for {
		t := g.next()
		if t == nil {
			return first, more
		}
		more = append(more, t)
	}
}

// next takes the batches that may go now in one command, oldest first,
// and counts the command in flight; nil when they must wait. Below the
// limit it takes up to full writes (at least one batch); at the limit, a
// full command: batches until they reach full writes (the last may pass
// it). g.mu is held.
func (g *gate) next() []*lot {
	if len(g.waiting) == 0 || g.inflight >= g.limit && g.waitingWrites < g.full {
		return nil
	}
	atLimit := g.inflight >= g.limit
	n, writes := 0, 0
	for n < len(g.waiting) {
		k := len(g.waiting[n].items)
		if atLimit && writes >= g.full || !atLimit && n > 0 && writes+k > g.full {
			break
		}
		writes += k
		n++
	}
	take := make([]*lot, n)
	copy(take, g.waiting)
	m := copy(g.waiting, g.waiting[n:])
	clear(g.waiting[m:])
	g.waiting = g.waiting[:m]
	g.waitingWrites -= writes
	g.inflight++
	return take
}
