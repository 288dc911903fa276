package wiresim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Error codes a reply may carry (MongoDB's numbers).
const (
	codeBadValue        = 2
	codeFailedToParse   = 9
	codeCursorNotFound  = 43
	codeCommandNotFound = 59
)

// cmdError is a command's failure: {ok: 0, errmsg, code, codeName}.
type cmdError struct {
	code     int32
	codeName string
	msg      string
}

func (e *cmdError) Error() string { return e.msg }

func badValue(format string, a ...any) error {
	return &cmdError{code: codeBadValue, codeName: "BadValue", msg: fmt.Sprintf(format, a...)}
}

// handler answers one connection's commands.
type handler struct {
	s      *Server
	connID int32
}

// handle appends the whole reply to req to dst.
func (h *handler) handle(ctx context.Context, req *request, dst []byte) []byte {
	h.s.stats.cmds.Add(1)
	dst = appendReplyStart(dst, req)
	start := len(dst)
	dst, err := h.command(ctx, req, dst)
	if err != nil {
		var ce *cmdError
		if !errors.As(err, &ce) {
			ce = &cmdError{code: codeFailedToParse, codeName: "FailedToParse", msg: err.Error()}
		}
		dst = appendError(dst[:start], ce)
	}
	return finishReply(dst)
}

// appendError appends a failed command's reply document.
func appendError(dst []byte, ce *cmdError) []byte {
	idx, d := bsoncore.AppendDocumentStart(dst)
	d = bsoncore.AppendDoubleElement(d, "ok", 0)
	d = bsoncore.AppendStringElement(d, "errmsg", ce.msg)
	d = bsoncore.AppendInt32Element(d, "code", ce.code)
	d = bsoncore.AppendStringElement(d, "codeName", ce.codeName)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst
}

// command appends the reply document of a command that succeeded.
func (h *handler) command(ctx context.Context, req *request, dst []byte) ([]byte, error) {
	name := req.name()
	switch name {
	case "hello", "isMaster", "ismaster":
		return h.hello(ctx, req, dst, name != "hello"), nil
	case "ping", "endSessions":
		return appendOK(dst), nil
	case "buildInfo", "buildinfo":
		return h.buildInfo(dst), nil
	case "find":
		return h.find(req, dst)
	case "getMore":
		return h.getMore(ctx, req, dst)
	case "killCursors":
		return h.killCursors(req, dst)
	case "insert", "update", "delete":
		return h.write(ctx, req, name, dst)
	case "bulkWrite":
		return h.bulkWrite(ctx, req, dst)
	}
	if h.s.o.Command != nil {
		if reply := h.s.o.Command(req.db, bson.Raw(req.body)); reply != nil {
			return append(dst, reply...), nil
		}
	}
	return dst, &cmdError{code: codeCommandNotFound, codeName: "CommandNotFound",
		msg: fmt.Sprintf("no such command: '%s' (the wire fixture answers only what the engine's benchmarks send)", name)}
}

func appendOK(dst []byte) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = bsoncore.AppendDoubleElement(dst, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// serverVersion is the release that matches a wire version.
func serverVersion(wire int32) (string, []int32) {
	switch {
	case wire >= WireVersion80:
		return "8.0.0", []int32{8, 0, 0, 0}
	case wire >= WireVersion70:
		return "7.0.0", []int32{7, 0, 0, 0}
	case wire >= WireVersion60:
		return "6.0.0", []int32{6, 0, 0, 0}
	case wire >= WireVersion50:
		return "5.0.0", []int32{5, 0, 0, 0}
	}
	return "4.4.0", []int32{4, 4, 0, 0}
}

// hello answers hello (and the legacy isMaster) as the primary of a
// one-member replica set. An awaitable hello (topologyVersion and
// maxAwaitTimeMS, the driver's monitor) is answered after
// maxAwaitTimeMS, or at once when the server closes: the topology never
// changes.
func (h *handler) hello(ctx context.Context, req *request, dst []byte, legacy bool) []byte {
	s := h.s
	if tv, ok := req.body.Lookup("topologyVersion").DocumentOK(); ok {
		if wait, ok := req.body.Lookup("maxAwaitTimeMS").AsInt64OK(); ok && wait > 0 {
			pid, _ := tv.Lookup("processId").ObjectIDOK()
			counter, _ := tv.Lookup("counter").AsInt64OK()
			changed := s.topologyChanged()
			if pid == s.processID && counter == s.topology.Load() {
				t := time.NewTimer(time.Duration(wait) * time.Millisecond)
				select {
				case <-t.C:
				case <-s.closed:
				case <-changed:
				case <-ctx.Done():
				}
				t.Stop()
			}
		}
	}
	now := time.Now()
	newest := s.newestTS()
	idx, d := bsoncore.AppendDocumentStart(dst)
	if legacy {
		d = bsoncore.AppendBooleanElement(d, "ismaster", true)
	} else {
		d = bsoncore.AppendBooleanElement(d, "isWritablePrimary", true)
	}
	if _, err := req.body.LookupErr("helloOk"); err == nil {
		d = bsoncore.AppendBooleanElement(d, "helloOk", true)
	}
	var tv int32
	tv, d = bsoncore.AppendDocumentElementStart(d, "topologyVersion")
	d = bsoncore.AppendObjectIDElement(d, "processId", s.processID)
	d = bsoncore.AppendInt64Element(d, "counter", s.topology.Load())
	d, _ = bsoncore.AppendDocumentEnd(d, tv)
	d = bsoncore.AppendArrayElement(d, "hosts", bsoncore.NewArrayBuilder().AppendString(s.addr).Build())
	d = bsoncore.AppendStringElement(d, "setName", s.o.SetName)
	d = bsoncore.AppendInt32Element(d, "setVersion", 1)
	d = bsoncore.AppendBooleanElement(d, "secondary", false)
	d = bsoncore.AppendStringElement(d, "primary", s.addr)
	d = bsoncore.AppendStringElement(d, "me", s.addr)
	d = bsoncore.AppendObjectIDElement(d, "electionId", s.processID)
	var lw, ot int32
	lw, d = bsoncore.AppendDocumentElementStart(d, "lastWrite")
	ot, d = bsoncore.AppendDocumentElementStart(d, "opTime")
	d = bsoncore.AppendTimestampElement(d, "ts", newest.T, newest.I)
	d = bsoncore.AppendInt64Element(d, "t", 1)
	d, _ = bsoncore.AppendDocumentEnd(d, ot)
	d = bsoncore.AppendDateTimeElement(d, "lastWriteDate", now.UnixMilli())
	var mt int32
	mt, d = bsoncore.AppendDocumentElementStart(d, "majorityOpTime")
	if s.o.Commit != nil {
		ts, term := s.o.Commit()
		d = bsoncore.AppendTimestampElement(d, "ts", ts.T, ts.I)
		d = bsoncore.AppendInt64Element(d, "t", term)
	} else {
		// Every entry served is committed, its term unknown.
		d = bsoncore.AppendTimestampElement(d, "ts", newest.T, newest.I)
	}
	d, _ = bsoncore.AppendDocumentEnd(d, mt)
	d, _ = bsoncore.AppendDocumentEnd(d, lw)
	d = bsoncore.AppendInt32Element(d, "maxBsonObjectSize", 16*1024*1024)
	d = bsoncore.AppendInt32Element(d, "maxMessageSizeBytes", maxMessageBytes)
	d = bsoncore.AppendInt32Element(d, "maxWriteBatchSize", 100_000)
	d = bsoncore.AppendDateTimeElement(d, "localTime", now.UnixMilli())
	d = bsoncore.AppendInt32Element(d, "logicalSessionTimeoutMinutes", 30)
	d = bsoncore.AppendInt32Element(d, "connectionId", h.connID)
	d = bsoncore.AppendInt32Element(d, "minWireVersion", 0)
	d = bsoncore.AppendInt32Element(d, "maxWireVersion", s.o.MaxWireVersion)
	d = bsoncore.AppendBooleanElement(d, "readOnly", false)
	d = bsoncore.AppendDoubleElement(d, "ok", 1)
	var ct, sig int32
	ct, d = bsoncore.AppendDocumentElementStart(d, "$clusterTime")
	d = bsoncore.AppendTimestampElement(d, "clusterTime", newest.T, newest.I)
	sig, d = bsoncore.AppendDocumentElementStart(d, "signature")
	d = bsoncore.AppendBinaryElement(d, "hash", 0, make([]byte, 20))
	d = bsoncore.AppendInt64Element(d, "keyId", 0)
	d, _ = bsoncore.AppendDocumentEnd(d, sig)
	d, _ = bsoncore.AppendDocumentEnd(d, ct)
	d = bsoncore.AppendTimestampElement(d, "operationTime", newest.T, newest.I)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst
}

// newestTS is the ts of the newest visible oplog entry, or the server's
// start time when there is none.
func (s *Server) newestTS() bson.Timestamp {
	if o, n := s.view(); o != nil && n > 0 {
		return o.TS(n - 1)
	}
	return bson.Timestamp{T: uint32(s.started.Unix())}
}

func (h *handler) buildInfo(dst []byte) []byte {
	version, parts := serverVersion(h.s.o.MaxWireVersion)
	arr := bsoncore.NewArrayBuilder()
	for _, p := range parts {
		arr.AppendInt32(p)
	}
	idx, d := bsoncore.AppendDocumentStart(dst)
	d = bsoncore.AppendStringElement(d, "version", version)
	d = bsoncore.AppendArrayElement(d, "versionArray", arr.Build())
	d = bsoncore.AppendStringElement(d, "gitVersion", "wiresim")
	d = bsoncore.AppendInt32Element(d, "bits", 64)
	d = bsoncore.AppendInt32Element(d, "maxBsonObjectSize", 16*1024*1024)
	d = bsoncore.AppendDoubleElement(d, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst
}

// write counts an insert, update or delete command's statements and
// acknowledges them all after the write delay.
func (h *handler) write(ctx context.Context, req *request, name string, dst []byte) ([]byte, error) {
	key := map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}[name]
	docs, err := req.docs(key)
	if err != nil {
		return dst, badValue("%s: %v", name, err)
	}
	n := int64(len(docs))
	c := Counts{Commands: 1, Writes: n}
	switch name {
	case "insert":
		c.Inserts = n
	case "update":
		c.Updates = n
	default:
		c.Deletes = n
	}
	c.Waited = h.delay(ctx)
	h.s.stats.addWrites(req.db, c)
	idx, d := bsoncore.AppendDocumentStart(dst)
	d = bsoncore.AppendInt64Element(d, "n", n)
	if name == "update" {
		d = bsoncore.AppendInt64Element(d, "nModified", n)
	}
	d = bsoncore.AppendDoubleElement(d, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst, nil
}

// bulkWrite counts a bulkWrite command's statements (ops, each naming
// its namespace in nsInfo) and acknowledges them all after the write
// delay. With errorsOnly, the cursor of results is empty.
func (h *handler) bulkWrite(ctx context.Context, req *request, dst []byte) ([]byte, error) {
	ops, err := req.docs("ops")
	if err != nil {
		return dst, badValue("bulkWrite: %v", err)
	}
	nsInfo, err := req.docs("nsInfo")
	if err != nil {
		return dst, badValue("bulkWrite: %v", err)
	}
	perDB, all, err := countBulkOps(ops, nsInfo)
	if err != nil {
		return dst, err
	}
	waited := h.delay(ctx)
	for db, c := range perDB {
		c.Waited = waited
		h.s.stats.addWrites(db, *c)
	}
	errorsOnly, _ := req.body.Lookup("errorsOnly").BooleanOK()
	return appendBulkWriteReply(dst, ops, all, errorsOnly), nil
}

// delay waits the write delay (or until the server closes) and returns
// how long it waited.
func (h *handler) delay(ctx context.Context) time.Duration {
	if h.s.o.WriteDelay <= 0 {
		return 0
	}
	start := time.Now()
	t := time.NewTimer(h.s.o.WriteDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.s.closed:
	case <-ctx.Done():
	}
	return time.Since(start)
}

// countBulkOps counts a bulkWrite's operations by kind, per database (the
// part of each op's nsInfo namespace before the dot) and in all.
func countBulkOps(ops, nsInfo []bsoncore.Document) (map[string]*Counts, Counts, error) {
	dbs := make([]string, len(nsInfo))
	for i, ns := range nsInfo {
		s, _ := ns.Lookup("ns").StringValueOK()
		dbs[i], _, _ = strings.Cut(s, ".")
	}
	perDB := map[string]*Counts{}
	var all Counts
	for i, op := range ops {
		elem, err := op.IndexErr(0)
		if err != nil {
			return nil, all, badValue("bulkWrite: ops.%d is empty", i)
		}
		at, ok := elem.Value().AsInt64OK()
		if !ok || at < 0 || at >= int64(len(dbs)) {
			return nil, all, badValue("bulkWrite: ops.%d: %s names no nsInfo entry", i, elem.Key())
		}
		c := perDB[dbs[at]]
		if c == nil {
			c = &Counts{Commands: 1}
			perDB[dbs[at]] = c
		}
		var one Counts
		switch elem.Key() {
		case "insert":
			one.Inserts = 1
		case "update":
			one.Updates = 1
		case "delete":
			one.Deletes = 1
		default:
			return nil, all, badValue("bulkWrite: ops.%d: unknown operation %q", i, elem.Key())
		}
		one.Writes = 1
		c.add(one)
		all.add(one)
	}
	return perDB, all, nil
}

// appendBulkWriteReply appends the reply to a bulkWrite whose every
// operation succeeded: its cursor of per-operation results (empty with
// errorsOnly) and the totals.
func appendBulkWriteReply(dst []byte, ops []bsoncore.Document, all Counts, errorsOnly bool) []byte {
	idx, d := bsoncore.AppendDocumentStart(dst)
	var cur, batch int32
	cur, d = bsoncore.AppendDocumentElementStart(d, "cursor")
	d = bsoncore.AppendInt64Element(d, "id", 0)
	batch, d = bsoncore.AppendArrayElementStart(d, "firstBatch")
	if !errorsOnly {
		var key []byte
		for i, op := range ops {
			kind := op.Index(0).Key()
			key = strconv.AppendInt(key[:0], int64(i), 10)
			var r int32
			r, d = bsoncore.AppendDocumentElementStart(d, string(key))
			d = bsoncore.AppendDoubleElement(d, "ok", 1)
			d = bsoncore.AppendInt32Element(d, "idx", int32(i))
			d = bsoncore.AppendInt32Element(d, "n", 1)
			if kind == "update" {
				d = bsoncore.AppendInt32Element(d, "nModified", 1)
			}
			d, _ = bsoncore.AppendDocumentEnd(d, r)
		}
	}
	d, _ = bsoncore.AppendArrayEnd(d, batch)
	d = bsoncore.AppendStringElement(d, "ns", "admin.$cmd.bulkWrite")
	d, _ = bsoncore.AppendDocumentEnd(d, cur)
	d = bsoncore.AppendInt32Element(d, "nErrors", 0)
	d = bsoncore.AppendInt64Element(d, "nInserted", all.Inserts)
	d = bsoncore.AppendInt64Element(d, "nMatched", all.Updates)
	d = bsoncore.AppendInt64Element(d, "nModified", all.Updates)
	d = bsoncore.AppendInt64Element(d, "nUpserted", 0)
	d = bsoncore.AppendInt64Element(d, "nDeleted", all.Deletes)
	d = bsoncore.AppendDoubleElement(d, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst
}
