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
// What it leaves out: the bypassWriteBlockingMode privilege (every client
// is a user without it), the oplog entry MongoDB writes when the mode
// changes, and the cluster-wide coordination of a sharded cluster (one
// proxy blocks the one server behind it).
type WriteBlockProxy struct {
	ln       net.Listener
	upstream string
	blocked  atomic.Bool
	refused  atomic.Int64
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
	done := make(chan struct{})
	go func() {
		defer close(done)
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
			if reply = p.answer(&req, reply[:0]); reply != nil {
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
// the server answers it.
func (p *WriteBlockProxy) answer(req *request, dst []byte) []byte {
	name := req.name()
	switch {
	case name == "setUserWriteBlockMode":
		dst = appendReplyStart(dst, req)
		global, ok := req.body.Lookup("global").BooleanOK()
		if !ok {
			return finishReply(appendError(dst, &cmdError{code: codeBadValue, codeName: "BadValue", msg: "setUserWriteBlockMode: global must be a boolean"}))
		}
		p.blocked.Store(global)
		return finishReply(appendOK(dst))
	case p.blocked.Load() && userWrites[name] && writesUserData(req, name):
		p.refused.Add(1)
		dst = appendReplyStart(dst, req)
		if key, ok := statementsKey[name]; ok {
			return finishReply(appendBlockedStatements(dst, req, key))
		}
		return finishReply(appendError(dst, &cmdError{code: codeUserWritesBlocked, codeName: "UserWritesBlocked", msg: userWritesBlockedMsg}))
	}
	return nil
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
