package wiresim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Wire versions of MongoDB releases: hello's maxWireVersion (the driver
// talks to 4.4 and later).
const (
	WireVersion44 = 9
	WireVersion50 = 13
	WireVersion60 = 17
	WireVersion70 = 21
	WireVersion80 = 25
)

// Options configure a Server.
type Options struct {
	// Oplog is served as local.oplog.rs; none (an empty oplog) when nil.
	Oplog Oplog
	// Hidden is how many of the oplog's last entries are not visible at
	// the start; Reveal shows them. Zero shows the whole oplog.
	Hidden int64
	// WriteDelay is how long each write command (insert, update, delete,
	// bulkWrite) waits before it is acknowledged: the server's share of a
	// write's round trip.
	WriteDelay time.Duration
	// MaxWireVersion is hello's maxWireVersion; WireVersion80 (which
	// offers the bulkWrite command) when zero.
	MaxWireVersion int32
	// SetName is the replica set's name; "wiresim" when empty.
	SetName string
	// Log receives connection errors; discarded when nil.
	Log *slog.Logger
	// Command, when set, answers the commands the fixture does not know
	// itself: it returns the whole reply document for database db and
	// command body (an error reply is {ok: 0, code, codeName, errmsg}),
	// or nil to leave the command unknown. Tests script DDL replies with
	// it.
	Command func(db string, body bson.Raw) bson.Raw
	// Commit, when set, is the majority commit point hello reports
	// (lastWrite.majorityOpTime: ts and term); when nil it is the newest
	// visible entry, with no term.
	Commit func() (bson.Timestamp, int64)
}

// Server is a running fixture server on a loopback port.
type Server struct {
	o         Options
	ln        net.Listener
	addr      string
	processID bson.ObjectID
	started   time.Time
	log       *slog.Logger

	// visible is how many oplog entries can be read; grown is closed and
	// replaced when it grows. oplogMu guards o.Oplog with it (Failover).
	oplogMu sync.RWMutex
	visible atomic.Int64
	// topology is hello's topologyVersion.counter, raised by Failover;
	// topoChanged is closed, and replaced, when it is.
	topology    atomic.Int64
	topoMu      sync.Mutex
	topoChanged chan struct{}
	growMu      sync.Mutex
	grown       chan struct{}

	curMu   sync.Mutex
	cursors map[int64]*cursor
	nextCur int64

	stats   statsCounter
	connIDs atomic.Int32

	closed   chan struct{}
	closeMu  sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	closeErr error
	once     sync.Once
}

// Start listens on a free loopback port and serves until Close.
func Start(o Options) (*Server, error) {
	if o.MaxWireVersion == 0 {
		o.MaxWireVersion = WireVersion80
	}
	if o.SetName == "" {
		o.SetName = "wiresim"
	}
	if o.Oplog != nil && (o.Hidden < 0 || o.Hidden > o.Oplog.Len()) {
		return nil, fmt.Errorf("wiresim: Hidden %d outside the oplog's %d entries", o.Hidden, o.Oplog.Len())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wiresim: listen: %w", err)
	}
	s := &Server{
		o: o, ln: ln, addr: ln.Addr().String(), processID: bson.NewObjectID(), started: time.Now(),
		log: o.Log, grown: make(chan struct{}), cursors: map[int64]*cursor{}, closed: make(chan struct{}),
		conns: map[net.Conn]struct{}{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.Oplog != nil {
		s.visible.Store(o.Oplog.Len() - o.Hidden)
	}
	s.stats.byDB = map[string]*Counts{}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// URI is a connection string for the server.
func (s *Server) URI() string { return "mongodb://" + s.addr + "/" }

// Reveal makes n more of the hidden oplog entries visible and wakes the
// awaitData cursors waiting for them.
func (s *Server) Reveal(n int64) {
	s.oplogMu.RLock()
	o := s.o.Oplog
	if o == nil {
		s.oplogMu.RUnlock()
		return
	}
	for {
		v := s.visible.Load()
		nv := min(v+n, o.Len())
		if s.visible.CompareAndSwap(v, nv) {
			break
		}
	}
	s.oplogMu.RUnlock()
	s.wake()
}

// wake wakes the awaitData cursors waiting for the oplog to grow.
func (s *Server) wake() {
	s.growMu.Lock()
	close(s.grown)
	s.grown = make(chan struct{})
	s.growMu.Unlock()
}

// growth returns the oplog, its visible count and a channel closed when
// it grows.
func (s *Server) growth() (Oplog, int64, <-chan struct{}) {
	s.growMu.Lock()
	defer s.growMu.Unlock()
	o, v := s.view()
	return o, v, s.grown
}

// view returns the oplog served and how many of its entries are visible,
// read together (Failover replaces both).
func (s *Server) view() (Oplog, int64) {
	s.oplogMu.RLock()
	defer s.oplogMu.RUnlock()
	return s.o.Oplog, s.visible.Load()
}

// Close stops listening, closes every connection and waits for their
// goroutines.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.closed)
		s.closeErr = s.ln.Close()
		s.closeMu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.closeMu.Unlock()
		s.wg.Wait()
	})
	return s.closeErr
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
			default:
				s.log.Warn("wiresim: accept", "err", err)
			}
			return
		}
		s.closeMu.Lock()
		select {
		case <-s.closed:
			s.closeMu.Unlock()
			_ = c.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.closeMu.Unlock()
		go s.serve(c)
	}
}

// serve answers one connection's commands in order until it closes.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.closeMu.Lock()
		delete(s.conns, c)
		s.closeMu.Unlock()
		_ = c.Close()
	}()
	h := &handler{s: s, connID: s.connIDs.Add(1)}
	r := bufio.NewReaderSize(c, 64<<10)
	var (
		in, out []byte
		req     request
	)
	for {
		var err error
		in, err = readMessage(r, in, &req)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("wiresim: read", "conn", h.connID, "err", err)
			}
			return
		}
		out = h.handle(context.Background(), &req, out[:0])
		if req.noReply {
			continue
		}
		if _, err := c.Write(out); err != nil {
			return
		}
		if cap(out) > 4<<20 {
			out = nil // do not keep a large reply's buffer per connection
		}
	}
}

// Counts are the writes a server acknowledged.
type Counts struct {
	// Commands are write commands (insert, update, delete, bulkWrite).
	Commands int64
	// Writes are the statements they carried: Inserts + Updates + Deletes.
	Writes, Inserts, Updates, Deletes int64
	// Waited is the time the commands spent in the write delay, as
	// measured: on a busy machine a wait lasts longer than asked.
	Waited time.Duration
}

func (c *Counts) add(o Counts) {
	c.Commands += o.Commands
	c.Writes += o.Writes
	c.Inserts += o.Inserts
	c.Updates += o.Updates
	c.Deletes += o.Deletes
	c.Waited += o.Waited
}

// Stats is a snapshot of what a server did.
type Stats struct {
	// Writes are all databases' writes; ByDB splits them by database (for
	// bulkWrite, the database of each statement's namespace, each command
	// counted once per database it wrote to).
	Writes Counts
	ByDB   map[string]Counts
	// Finds and GetMores count cursor reads; Entries are the oplog
	// entries they returned.
	Finds, GetMores, Entries int64
	// Commands counts every command answered.
	Commands int64
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return s.stats.snapshot()
}

// WaitWrites waits until the server has acknowledged at least n writes
// to database db, or ctx ends.
func (s *Server) WaitWrites(ctx context.Context, db string, n int64) error {
	c := &s.stats
	c.mu.Lock()
	if d := c.byDB[db]; d != nil && d.Writes >= n {
		c.mu.Unlock()
		return nil
	}
	w := waiter{db: db, n: n, done: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// statsCounter holds the counters behind Stats.
type statsCounter struct {
	mu      sync.Mutex
	all     Counts
	byDB    map[string]*Counts
	reads   struct{ finds, getMores, entries int64 }
	cmds    atomic.Int64
	waiters []waiter
}

// waiter is a WaitWrites call: done closes once db has n writes.
type waiter struct {
	db   string
	n    int64
	done chan struct{}
}

func (c *statsCounter) addWrites(db string, n Counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all.add(n)
	d := c.byDB[db]
	if d == nil {
		d = &Counts{}
		c.byDB[db] = d
	}
	d.add(n)
	if len(c.waiters) == 0 {
		return
	}
	left := c.waiters[:0]
	for _, w := range c.waiters {
		if w.db == db && d.Writes >= w.n {
			close(w.done)
			continue
		}
		left = append(left, w)
	}
	c.waiters = left
}

func (c *statsCounter) addReads(find bool, entries int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if find {
		c.reads.finds++
	} else {
		c.reads.getMores++
	}
	c.reads.entries += entries
}

func (c *statsCounter) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Writes: c.all, ByDB: make(map[string]Counts, len(c.byDB)),
		Finds: c.reads.finds, GetMores: c.reads.getMores, Entries: c.reads.entries, Commands: c.cmds.Load()}
	for db, n := range c.byDB {
		st.ByDB[db] = *n
	}
	return st
}
