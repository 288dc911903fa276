package wiresim

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// oplogNS is the one collection with documents.
const oplogNS = "local.oplog.rs"

// maxBatchBytes caps the documents of one reply batch, as a server does.
const maxBatchBytes = 16 << 20

// defaultFirstBatch is a find's batch size when it names none.
const defaultFirstBatch = 101

// bound is one side of a ts range.
type bound struct {
	ts        bson.Timestamp
	inclusive bool
	set       bool
}

// cursor is an open cursor on the oplog.
type cursor struct {
	mu sync.Mutex
	id int64
	// next is the index of the next entry to look at; lower and upper
	// bound the ts range (upper is re-resolved as the oplog grows).
	next     int64
	lower    bound
	upper    bound
	backward bool
	tailable bool
	await    bool
	// single: close the cursor after its first batch.
	single bool
	// left is how many entries the limit still allows; 0: no limit.
	left int64
	// skipNS are the ns $nin patterns; skipped caches their verdict by ns.
	skipNS  []*regexp.Regexp
	skipStr []string
	skipped map[string]bool
}

// find opens a cursor on local.oplog.rs and returns its first batch;
// every other collection is empty.
func (h *handler) find(req *request, dst []byte) ([]byte, error) {
	coll, _ := req.body.Lookup("find").StringValueOK()
	ns := req.db + "." + coll
	o, visible := h.s.view()
	if ns != oplogNS || o == nil {
		h.s.stats.addReads(true, 0)
		return appendEmptyCursor(dst, ns, "firstBatch", 0), nil
	}
	c := &cursor{}
	if err := c.parse(req.body); err != nil {
		return dst, err
	}
	if c.backward {
		c.next = end(o, c, visible) - 1
	} else {
		c.next = start(o, c, visible)
	}
	size := int64(defaultFirstBatch)
	if v, ok := req.body.Lookup("batchSize").AsInt64OK(); ok {
		size = v
	}
	var r cursorReply
	dst = r.start(dst, "firstBatch")
	dst, n, more := h.s.fill(dst, c, size)
	h.s.stats.addReads(true, n)
	id := int64(0)
	if more && !c.single {
		h.s.curMu.Lock()
		h.s.nextCur++
		c.id = h.s.nextCur
		h.s.cursors[c.id] = c
		h.s.curMu.Unlock()
		id = c.id
	}
	return r.finish(dst, ns, id), nil
}

// parse reads a find's filter, sort, limit and cursor flags.
func (c *cursor) parse(body bsoncore.Document) error {
	c.tailable, _ = body.Lookup("tailable").BooleanOK()
	c.await, _ = body.Lookup("awaitData").BooleanOK()
	if l, ok := body.Lookup("limit").AsInt64OK(); ok {
		c.left = max(l, -l)
		c.single = l < 0 // a negative limit: one batch, then close
	}
	if single, _ := body.Lookup("singleBatch").BooleanOK(); single {
		c.single = true
	}
	if sort, ok := body.Lookup("sort").DocumentOK(); ok {
		elems, _ := sort.Elements()
		for _, e := range elems {
			dir, _ := e.Value().AsInt64OK()
			if (e.Key() != "$natural" && e.Key() != "ts") || (dir != 1 && dir != -1) {
				return badValue("sort %s: the wire fixture sorts the oplog by $natural or ts, 1 or -1", sort)
			}
			c.backward = dir == -1
		}
	}
	filter, _ := body.Lookup("filter").DocumentOK()
	elems, err := filter.Elements()
	if err != nil && filter != nil {
		return badValue("filter: %v", err)
	}
	for _, e := range elems {
		switch e.Key() {
		case "ts":
			if err := c.parseTS(e.Value()); err != nil {
				return err
			}
		case "ns":
			if err := c.parseNS(e.Value()); err != nil {
				return err
			}
		default:
			return badValue("filter field %s: the wire fixture filters the oplog on ts and ns only", e.Key())
		}
	}
	return nil
}

func (c *cursor) parseTS(v bsoncore.Value) error {
	if t, i, ok := v.TimestampOK(); ok {
		ts := bson.Timestamp{T: t, I: i}
		c.lower, c.upper = bound{ts, true, true}, bound{ts, true, true}
		return nil
	}
	ops, ok := v.DocumentOK()
	if !ok {
		return badValue("filter ts: want a Timestamp or {$gt: Timestamp}, got %s", v.Type)
	}
	elems, _ := ops.Elements()
	for _, e := range elems {
		t, i, ok := e.Value().TimestampOK()
		if !ok {
			return badValue("filter ts.%s: want a Timestamp, got %s", e.Key(), e.Value().Type)
		}
		ts := bson.Timestamp{T: t, I: i}
		switch e.Key() {
		case "$gt":
			c.lower = bound{ts, false, true}
		case "$gte":
			c.lower = bound{ts, true, true}
		case "$lt":
			c.upper = bound{ts, false, true}
		case "$lte":
			c.upper = bound{ts, true, true}
		default:
			return badValue("filter ts.%s: the wire fixture knows $gt, $gte, $lt and $lte", e.Key())
		}
	}
	return nil
}

func (c *cursor) parseNS(v bsoncore.Value) error {
	ops, ok := v.DocumentOK()
	if !ok {
		return badValue("filter ns: want {$nin: [...]}, got %s", v.Type)
	}
	list, ok := ops.Lookup("$nin").ArrayOK()
	if !ok || len(ops) == 0 {
		return badValue("filter ns: the wire fixture knows only $nin")
	}
	if n, _ := ops.Elements(); len(n) != 1 {
		return badValue("filter ns: the wire fixture knows only $nin")
	}
	vals, _ := list.Values()
	for _, v := range vals {
		if p, opts, ok := v.RegexOK(); ok {
			re, err := regexp.Compile("(?" + opts + ")" + p)
			if opts == "" {
				re, err = regexp.Compile(p)
			}
			if err != nil {
				return badValue("filter ns.$nin: %v", err)
			}
			c.skipNS = append(c.skipNS, re)
			continue
		}
		s, ok := v.StringValueOK()
		if !ok {
			return badValue("filter ns.$nin: want strings or regular expressions, got %s", v.Type)
		}
		c.skipStr = append(c.skipStr, s)
	}
	c.skipped = map[string]bool{}
	return nil
}

// skip reports whether an entry of namespace ns is filtered out.
func (c *cursor) skip(ns string) bool {
	if c.skipped == nil {
		return false
	}
	if v, ok := c.skipped[ns]; ok {
		return v
	}
	v := false
	for _, s := range c.skipStr {
		v = v || s == ns
	}
	for _, re := range c.skipNS {
		v = v || re.MatchString(ns)
	}
	c.skipped[ns] = v
	return v
}

// start is the first index at or after the cursor's lower bound.
func start(o Oplog, c *cursor, visible int64) int64 {
	if !c.lower.set {
		return 0
	}
	return search(o, visible, c.lower.ts, c.lower.inclusive)
}

// end is the index past the last visible entry within the upper bound.
func end(o Oplog, c *cursor, visible int64) int64 {
	if !c.upper.set {
		return visible
	}
	return search(o, visible, c.upper.ts, !c.upper.inclusive)
}

// fill appends the cursor's next batch of at most size entries (no cap
// when size <= 0) to dst as array elements, and says how many it
// appended and whether the cursor stays open.
func (s *Server) fill(dst []byte, c *cursor, size int64) (_ []byte, n int64, open bool) {
	o, visible := s.view()
	end := end(o, c, visible)
	lo := start(o, c, visible)
	if c.left > 0 && (size <= 0 || size > c.left) {
		size = c.left
	}
	begin := len(dst)
	for size <= 0 || n < size {
		if len(dst)-begin >= maxBatchBytes {
			break
		}
		k := c.next
		if (!c.backward && k >= end) || (c.backward && k < lo) || k >= visible {
			break
		}
		if c.backward {
			c.next--
		} else {
			c.next++
		}
		if c.skip(o.NS(k)) {
			continue
		}
		dst = append(dst, byte(bsoncore.TypeEmbeddedDocument))
		dst = strconv.AppendInt(dst, n, 10)
		dst = append(dst, 0)
		dst = o.AppendEntry(dst, k)
		n++
	}
	if c.left > 0 {
		c.left -= n
		if c.left == 0 {
			return dst, n, false
		}
	}
	if c.tailable {
		return dst, n, true
	}
	if c.backward {
		return dst, n, c.next >= lo
	}
	return dst, n, c.next < end
}

// getMore returns a cursor's next batch. A tailable awaitData cursor
// with nothing new waits up to maxTimeMS (1s when not given) for the
// oplog to grow.
func (h *handler) getMore(ctx context.Context, req *request, dst []byte) ([]byte, error) {
	id, ok := req.body.Lookup("getMore").Int64OK()
	if !ok {
		return dst, badValue("getMore: want an int64 cursor id")
	}
	coll, _ := req.body.Lookup("collection").StringValueOK()
	ns := req.db + "." + coll
	s := h.s
	s.curMu.Lock()
	c := s.cursors[id]
	s.curMu.Unlock()
	if c == nil {
		return dst, &cmdError{code: codeCursorNotFound, codeName: "CursorNotFound", msg: fmt.Sprintf("cursor id %d not found", id)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	size, _ := req.body.Lookup("batchSize").AsInt64OK()
	wait := time.Second
	if ms, ok := req.body.Lookup("maxTimeMS").AsInt64OK(); ok && ms > 0 {
		wait = time.Duration(ms) * time.Millisecond
	}
	var deadline <-chan time.Time
	begin := len(dst)
	for {
		o, visible, grown := s.growth()
		var r cursorReply
		d := r.start(dst[:begin], "nextBatch")
		d, n, open := s.fill(d, c, size)
		if n > 0 || !open || !c.await || c.backward || (c.upper.set && end(o, c, visible) < visible) {
			s.stats.addReads(false, n)
			if !open {
				s.curMu.Lock()
				delete(s.cursors, id)
				s.curMu.Unlock()
				id = 0
			}
			return r.finish(d, ns, id), nil
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-grown:
			continue
		case <-deadline:
		case <-s.closed:
		case <-ctx.Done():
		}
		s.stats.addReads(false, 0)
		return appendEmptyCursor(dst[:begin], ns, "nextBatch", id), nil
	}
}

// killCursors closes cursors.
func (h *handler) killCursors(req *request, dst []byte) ([]byte, error) {
	ids, ok := req.body.Lookup("cursors").ArrayOK()
	if !ok {
		return dst, badValue("killCursors: want an array of cursor ids")
	}
	vals, _ := ids.Values()
	killed, missing := bsoncore.NewArrayBuilder(), bsoncore.NewArrayBuilder()
	h.s.curMu.Lock()
	for _, v := range vals {
		id, _ := v.Int64OK()
		if _, ok := h.s.cursors[id]; ok {
			delete(h.s.cursors, id)
			killed.AppendInt64(id)
		} else {
			missing.AppendInt64(id)
		}
	}
	h.s.curMu.Unlock()
	idx, d := bsoncore.AppendDocumentStart(dst)
	d = bsoncore.AppendArrayElement(d, "cursorsKilled", killed.Build())
	d = bsoncore.AppendArrayElement(d, "cursorsNotFound", missing.Build())
	d = bsoncore.AppendArrayElement(d, "cursorsAlive", bsoncore.NewArrayBuilder().Build())
	d = bsoncore.AppendArrayElement(d, "cursorsUnknown", bsoncore.NewArrayBuilder().Build())
	d = bsoncore.AppendDoubleElement(d, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(d, idx)
	return dst, nil
}

// cursorReply builds {cursor: {<key>: [...], id, ns}, ok: 1}: start
// opens the batch array, whose elements the caller appends, and finish
// closes it with the cursor's id.
type cursorReply struct{ doc, cur, arr int32 }

func (r *cursorReply) start(dst []byte, key string) []byte {
	r.doc, dst = bsoncore.AppendDocumentStart(dst)
	r.cur, dst = bsoncore.AppendDocumentElementStart(dst, "cursor")
	r.arr, dst = bsoncore.AppendArrayElementStart(dst, key)
	return dst
}

func (r *cursorReply) finish(dst []byte, ns string, id int64) []byte {
	dst, _ = bsoncore.AppendArrayEnd(dst, r.arr)
	dst = bsoncore.AppendInt64Element(dst, "id", id)
	dst = bsoncore.AppendStringElement(dst, "ns", ns)
	dst, _ = bsoncore.AppendDocumentEnd(dst, r.cur)
	dst = bsoncore.AppendDoubleElement(dst, "ok", 1)
	dst, _ = bsoncore.AppendDocumentEnd(dst, r.doc)
	return dst
}

// appendEmptyCursor appends the reply of a cursor with nothing to return.
func appendEmptyCursor(dst []byte, ns, key string, id int64) []byte {
	var r cursorReply
	return r.finish(r.start(dst, key), ns, id)
}
