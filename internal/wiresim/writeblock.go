package wiresim

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// codeUserWritesBlocked is MongoDB's error for a user write refused while
// setUserWriteBlockMode blocks them (ErrorCodes::UserWritesBlocked).
const codeUserWritesBlocked = 372

// userWrites are the commands MongoDB refuses while user writes are
// blocked: writes and the DDL that changes user collections.
var userWrites = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true, "bulkWrite": true,
	"create": true, "drop": true, "dropDatabase": true, "createIndexes": true, "dropIndexes": true,
	"renameCollection": true, "collMod": true, "convertToCapped": true, "cloneCollectionAsCapped": true,
}

// WriteBlockProxy stands in for MongoDB's user write blocking
// (setUserWriteBlockMode, MongoDB 6.0 and later) in front of a server
// that lacks it, such as FerretDB. It forwards every message between the
// clients and that server unchanged, except two kinds it answers itself,
// as a MongoDB primary would:
//   - setUserWriteBlockMode {global: true|false} blocks or unblocks user
//     writes and answers ok;
//   - while writes are blocked, a user write (insert, update, delete,
//     findAndModify, bulkWrite and the DDL commands) to a database other
//     than admin, config and local is refused with code 372,
//     UserWritesBlocked, and never reaches the server: insert, update and
//     delete as MongoDB refuses them, with a write error per statement
//     tried; the others as a command error.
//
// As on MongoDB, where setUserWriteBlockMode takes the global lock in
// exclusive mode, blocking answers only once the user writes already
// forwarded to the server have been answered: a write the server has not
// logged yet when the block is acknowledged would land after a drain
// position read next.
//
// What it leaves out: the bypassWriteBlockingMode privilege (every client
// is a user without it), the oplog entry MongoDB writes when the mode
// changes, and the cluster-wide coordination of a sharded cluster (one
// proxy blocks the one server behind it).
type WriteBlockProxy struct {
	ln       net.Listener
	upstream string
	blocked  atomic.Bool
	refused  atomic.Int64
	// gate orders the block against the writes let through: inflight
	// counts user writes forwarded and not yet answered; idle is
	// signalled when it drops to zero.
	gate     sync.Mutex
	idle     *sync.Cond
	inflight int
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

// StartWriteBlockProxy listens on a loopback port and forwards to the
// server at upstream (host:port).
func StartWriteBlockProxy(upstream string) (*WriteBlockProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &WriteBlockProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	p.idle = sync.NewCond(&p.gate)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *WriteBlockProxy) Addr() string { return p.ln.Addr().String() }

// URI reaches the server through the proxy.
func (p *WriteBlockProxy) URI() string { return "mongodb://" + p.Addr() + "/?directConnection=true" }

// Blocked reports whether user writes are blocked.
func (p *WriteBlockProxy) Blocked() bool { return p.blocked.Load() }

// Refused counts the user writes refused while blocked.
func (p *WriteBlockProxy) Refused() int64 { return p.refused.Load() }

// Close stops listening and closes every connection.
func (p *WriteBlockProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *WriteBlockProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c, up)
	}
}

// serve carries one client connection: the client's messages to the
// server (or answered here), the server's replies back whole, so that an
// answer made here never lands inside one of them.
func (p *WriteBlockProxy) serve(c, up net.Conn) {
	defer p.wg.Done()
	var wmu sync.Mutex // writes to c
	// pending counts this connection's forwarded user writes not yet
	// answered: a driver sends one request at a time on a connection, so
	// the next reply is the write's.
	var pending atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for pending.Add(-1) >= 0 {
				p.writeAnswered()
			}
		}()
		r := bufio.NewReaderSize(up, 64<<10)
		var buf []byte
		for {
			var err error
			if buf, err = readRaw(r, buf); err != nil {
				break
			}
			wmu.Lock()
			_, err = c.Write(buf)
			wmu.Unlock()
			if pending.Load() > 0 {
				pending.Add(-1)
				p.writeAnswered()
			}
			if err != nil {
				break
			}
		}
		_ = c.Close()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	var (
		buf   []byte
		reply []byte
		req   request
	)
	for {
		var err error
		if buf, err = readRaw(r, buf); err != nil {
			break
		}
		if parseRequest(buf, &req) == nil {
			var counted bool
			if reply, counted = p.answer(&req, reply[:0]); counted {
				pending.Add(1)
			}
			if reply != nil {
				if req.noReply {
					continue
				}
				wmu.Lock()
				_, err = c.Write(reply)
				wmu.Unlock()
				if err != nil {
					break
				}
				continue
			}
		}
		if _, err := up.Write(buf); err != nil {
			break
		}
	}
	_ = up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// answer appends the proxy's own reply to req to dst, or returns nil when
// the server answers it; counted says a user write goes to the server and
// its reply is awaited before writes can be blocked.
func (p *WriteBlockProxy) answer(req *request, dst []byte) ([]byte, bool) {
	name := req.name()
	switch {
	case name == "setUserWriteBlockMode":
		dst = appendReplyStart(dst, req)
		global, ok := req.body.Lookup("global").BooleanOK()
		if !ok {
			return finishReply(appendError(dst, &cmdError{code: codeBadValue, codeName: "BadValue", msg: "setUserWriteBlockMode: global must be a boolean"})), false
		}
		p.setBlocked(global)
		return finishReply(appendOK(dst)), false
	case userWrites[name] && writesUserData(req, name):
		p.gate.Lock()
		if !p.blocked.Load() {
			counted := !req.noReply
			if counted {
				p.inflight++
			}
			p.gate.Unlock()
			return nil, counted
		}
		p.gate.Unlock()
		p.refused.Add(1)
		dst = appendReplyStart(dst, req)
		if key, ok := statementsKey[name]; ok {
			return finishReply(appendBlockedStatements(dst, req, key)), false
		}
		return finishReply(appendError(dst, &cmdError{code: codeUserWritesBlocked, codeName: "UserWritesBlocked", msg: userWritesBlockedMsg})), false
	}
	return nil, false
}

// setBlocked blocks or unblocks user writes; blocking returns once every
// user write already forwarded has been answered.
func (p *WriteBlockProxy) setBlocked(block bool) {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.blocked.Store(block)
	for block && p.inflight > 0 {
		p.idle.Wait()
	}
}

// writeAnswered counts a forwarded user write as answered.
func (p *WriteBlockProxy) writeAnswered() {
	p.gate.Lock()
	defer p.gate.Unlock()
	p.inflight--
	if p.inflight <= 0 {
		p.idle.Broadcast()
	}
}

// userWritesBlockedMsg is MongoDB's message for a blocked write.
const userWritesBlockedMsg = "User writes blocked"

// statementsKey names the statements of the write commands MongoDB
// refuses statement by statement: the block is checked as each document
// is written, so the command succeeds with a write error per statement
// it tried (the first of an ordered command, every one of an unordered
// one).
var statementsKey = map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}

// appendBlockedStatements appends {n: 0, writeErrors: [...], ok: 1} for
// a write command whose statements are all refused as blocked.
func appendBlockedStatements(dst []byte, req *request, key string) []byte {
	stmts, _ := req.docs(key)
	tried := len(stmts)
	if ordered, ok := req.body.Lookup("ordered").BooleanOK(); (!ok || ordered) && tried > 1 {
		tried = 1
	}
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = bsoncore.AppendInt32Element(dst, "n", 0)
	if tried > 0 {
		var aidx int32
		aidx, dst = bsoncore.AppendArrayElementStart(dst, "writeErrors")
		for i := range tried {
			var eidx int32
			eidx, dst = bsoncore.AppendDocumentElementStart(dst, strconv.Itoa(i))
			dst = bsoncore.AppendInt32Element(dst, "index", int32(i))
			dst = bsoncore.AppendInt32Element(dst, "code", codeUserWritesBlocked)
			dst = bsoncore.AppendStringElement(dst, "errmsg", userWritesBlockedMsg)
			dst, _ = bsoncore.AppendDocumentEnd(dst, eidx)
		}
		dst, _ = bsoncore.AppendArrayEnd(dst, aidx)
	}
	dst = bsoncore.AppendDoubleElement(dst, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// writesUserData reports whether a write command touches a user database:
// $db for most, the namespaces of nsInfo for bulkWrite (sent to admin).
func writesUserData(req *request, name string) bool {
	if name != "bulkWrite" {
		return !internalDB(req.db)
	}
	infos, err := req.docs("nsInfo")
	if err != nil {
		return true
	}
	for _, info := range infos {
		ns, _ := info.Lookup("ns").StringValueOK()
		db, _, _ := strings.Cut(ns, ".")
		if !internalDB(db) {
			return true
		}
	}
	return false
}

func internalDB(db string) bool { return db == "admin" || db == "config" || db == "local" }
