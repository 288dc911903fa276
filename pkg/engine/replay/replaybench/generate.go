package replaybench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Shape is the kind of oplog a benchmark replays.
type Shape string

// The shapes.
const (
	// ShapeDDT is the shape DDT published its replay figures with: small
	// documents (about 140 bytes: an ObjectId _id, two short strings, an
	// int, a double, a date and a boolean) over 10 collections.
	ShapeDDT Shape = "ddt"
	// ShapeYCSB is YCSB's usertable: a string _id and 10 fields of 100
	// characters (1159 bytes), one collection.
	ShapeYCSB Shape = "ycsb"
	// ShapeInsertMany is MongoDB 8.0's retryable insertMany of 500 DDT
	// documents: eight applyOps entries (seven batches of 64 inserts and
	// one of 52), each with lsid, txnNumber, multiOpType 1 and a
	// prevOpTime naming the previous batch. Every batch is a unit of its
	// own, applied without draining the writers. Its mix is all inserts.
	ShapeInsertMany Shape = "insertmany"
)

// Shapes are the known shapes, in the order `both` runs them.
var Shapes = []Shape{ShapeDDT, ShapeYCSB}

// AllShapes are every shape, ShapeInsertMany included.
var AllShapes = []Shape{ShapeDDT, ShapeYCSB, ShapeInsertMany}

// Mix is the share of each operation, in percent.
type Mix struct{ Insert, Update, Delete int }

// DefaultMix is 60% inserts, 30% updates ($v:2 diffs that set one field)
// and 10% deletes.
var DefaultMix = Mix{Insert: 60, Update: 30, Delete: 10}

// Input is a generated oplog: a pool of distinct entries that a Reader
// replays, in a cycle, as many times as a run needs, each time with a new
// ts. Keeping the pool small (DefaultPool) keeps the live heap, and so the
// garbage collector's pacing and the peak RSS, close to what a tailer
// holds, whatever the number of operations replayed.
type Input struct {
	Shape Shape
	Mix   Mix
	// Entries are the raw entries of the pool, in oplog order, each
	// translating to exactly one write; tsAt[i] is the offset of entry i's
	// ts value in its bytes, and kinds[i] its op ('i', 'u' or 'd').
	Entries []bson.Raw
	tsAt    []int
	kinds   []byte
	// writes[i] is the number of writes entry i translates to, when not
	// one (ShapeInsertMany's batches); nil otherwise.
	writes []uint8
	// Bytes is the size of the pool's entries; DocBytes that of one
	// inserted document.
	Bytes    int64
	DocBytes int
	// Collections is the number of namespaces written.
	Collections int
	// From is the position just before the first entry.
	From bson.Timestamp
	// ShardKey is the field the collections are sharded on, before _id,
	// when not by _id (GenerateKeyed).
	ShardKey string
}

// DefaultPool is the number of distinct entries Generate makes by default.
const DefaultPool = 100_000

// Counts are the entries of each kind among the first ops of a replay.
type Counts struct{ Inserts, Updates, Deletes int64 }

// Writes is the number of writes the entries translate to (one each).
func (c Counts) Writes() int64 { return c.Inserts + c.Updates + c.Deletes }

// Counts returns the kinds of the first ops entries a Reader serves.
func (in *Input) Counts(ops int64) Counts {
	n := int64(len(in.kinds))
	cycles, rest := ops/n, ops%n
	var c Counts
	for i, k := range in.kinds {
		times := cycles
		if int64(i) < rest {
			times++
		}
		if in.writes != nil {
			times *= int64(in.writes[i])
		}
		switch k {
		case 'i':
			c.Inserts += times
		case 'u':
			c.Updates += times
		default:
			c.Deletes += times
		}
	}
	return c
}

// TS returns the position of entry k (from 0) of a replay.
func (in *Input) TS(k int64) bson.Timestamp {
	return bson.Timestamp{T: in.From.T + uint32(k/10_000), I: uint32(k%10_000) + 1}
}

// EntryBytes is the average size of an entry.
func (in *Input) EntryBytes() float64 { return float64(in.Bytes) / float64(len(in.Entries)) }

// ParseShape checks a shape name.
func ParseShape(s string) (Shape, error) {
	for _, sh := range AllShapes {
		if string(sh) == s {
			return sh, nil
		}
	}
	return "", fmt.Errorf("unknown shape %q: use ddt, ycsb or insertmany", s)
}

// shapeSpec is what differs between shapes.
type shapeSpec struct {
	db          string
	collections int
	// doc appends document n of a collection to dst.
	doc func(dst []byte, rng *rand.Rand, coll, n int) []byte
	// id appends the _id of document n as an element to dst.
	id func(dst []byte, coll, n int) []byte
	// update returns the diff's u section: one field set.
	update func(dst []byte, rng *rand.Rand) []byte
	// batched: every entry is one batch of a retryable insertMany.
	batched bool
}

func specOf(s Shape) (shapeSpec, error) {
	switch s {
	case ShapeDDT:
		return shapeSpec{db: "ddt", collections: 10, doc: ddtDoc, id: objectIDElem, update: ddtUpdate}, nil
	case ShapeYCSB:
		return shapeSpec{db: "ycsb", collections: 1, doc: ycsbDoc, id: userKeyElem, update: ycsbUpdate}, nil
	case ShapeInsertMany:
		return shapeSpec{db: "batched", collections: 10, doc: ddtDoc, id: objectIDElem, update: ddtUpdate, batched: true}, nil
	}
	return shapeSpec{}, fmt.Errorf("unknown shape %q: use ddt, ycsb or insertmany", s)
}

// baseTime is the wall time of the first generated entry.
var baseTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Generate builds a pool of n distinct entries of the shape with the mix
// (DefaultMix when zero) from a fixed seed. Updates and deletes pick a
// document inserted earlier in the pool and not deleted since, so the pool
// is an oplog a server could have written. The entries share a few large
// buffers.
func Generate(shape Shape, n int, mix Mix, seed uint64) (*Input, error) {
	return GenerateKeyed(shape, n, mix, seed, "")
}

// GenerateKeyed is Generate for collections sharded on {shardKey: 1,
// _id: 1} when shardKey is not empty: every document gets an int32
// shardKey field after its others, and every entry carries the document
// key {shardKey, _id} as a sharded source logs it (in o2 of inserts and
// updates, in o of deletes). The replayer of a sharded source then holds
// every insert for _id reuse across shards (idReuseAcrossShards: hold).
func GenerateKeyed(shape Shape, n int, mix Mix, seed uint64, shardKey string) (*Input, error) {
	spec, err := specOf(shape)
	if err != nil {
		return nil, err
	}
	mix, n, err = poolOf(spec, mix, n)
	if err != nil {
		return nil, err
	}
	in := &Input{Shape: shape, Mix: mix, Entries: make([]bson.Raw, 0, n), tsAt: make([]int, 0, n), kinds: make([]byte, 0, n),
		Collections: spec.collections, From: bson.Timestamp{T: uint32(baseTime.Unix())}, ShardKey: shardKey}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := newGenerator(spec, rng, shardKey)
	var (
		arena   []byte
		scratch []byte
	)
	for i := range n {
		ts := in.TS(int64(i))
		wall := baseTime.Add(time.Duration(i) * 100 * time.Microsecond)
		c := rng.IntN(spec.collections)
		p := rng.IntN(100)
		var kind byte
		switch {
		case spec.batched:
			c = (i / ((insertManyDocs + batchDocs - 1) / batchDocs)) % spec.collections // one collection per insertMany
			var docs int
			scratch, docs = g.batch(scratch[:0], c, i, ts, wall)
			in.writes = append(in.writes, uint8(docs))
			kind = 'i'
			if in.DocBytes == 0 {
				in.DocBytes = len(g.doc)
			}
		case p < mix.Insert || len(g.live[c]) == 0:
			var docLen int
			scratch, docLen = g.insert(scratch[:0], c, ts, wall)
			kind = 'i'
			if in.DocBytes == 0 {
				in.DocBytes = docLen
			}
		case p < mix.Insert+mix.Update:
			scratch, kind = g.update(scratch[:0], c, ts, wall), 'u'
		default:
			scratch, kind = g.delete(scratch[:0], c, ts, wall), 'd'
		}
		// Copy the entry into the arena, a new 4 MiB chunk when full.
		if len(arena)+len(scratch) > cap(arena) {
			arena = make([]byte, 0, max(4<<20, len(scratch)))
		}
		start := len(arena)
		arena = append(arena, scratch...)
		in.Entries = append(in.Entries, bson.Raw(arena[start:len(arena):len(arena)]))
		in.tsAt = append(in.tsAt, g.tsAt)
		in.kinds = append(in.kinds, kind)
		in.Bytes += int64(len(scratch))
	}
	return in, nil
}

// poolOf returns the mix and the pool size a shape generates: the
// default mix when mix is zero; a batched shape's inserts only, in whole
// insertManys of 64-insert batches, about as many documents as another
// shape's pool of n entries.
func poolOf(spec shapeSpec, mix Mix, n int) (Mix, int, error) {
	if mix == (Mix{}) {
		mix = DefaultMix
	}
	if spec.batched {
		mix = Mix{Insert: 100}
		perMany := (insertManyDocs + batchDocs - 1) / batchDocs
		n = max(perMany, n/batchDocs/perMany*perMany)
	}
	if mix.Insert <= 0 || mix.Update < 0 || mix.Delete < 0 || mix.Insert+mix.Update+mix.Delete != 100 {
		return mix, n, fmt.Errorf("mix %+v: shares must add up to 100, with inserts above 0", mix)
	}
	if n < 1 {
		return mix, n, fmt.Errorf("the pool must hold at least 1 entry, got %d", n)
	}
	return mix, n, nil
}

// newGenerator returns the generator of a shape's entries: its
// collections' namespaces and UUIDs, drawn from rng.
func newGenerator(spec shapeSpec, rng *rand.Rand, shardKey string) generator {
	g := generator{spec: spec, rng: rng, live: make([][]int, spec.collections), next: make([]int, spec.collections), shardKey: shardKey}
	g.nss = make([]string, spec.collections)
	g.uis = make([][]byte, spec.collections)
	for c := range g.nss {
		if spec.collections == 1 {
			g.nss[c] = spec.db + ".usertable"
		} else {
			g.nss[c] = spec.db + ".coll" + strconv.Itoa(c)
		}
		ui := make([]byte, 16)
		for i := range ui {
			ui[i] = byte(rng.Uint32())
		}
		g.uis[c] = ui
	}
	return g
}

// generator holds the state of one Generate call.
type generator struct {
	spec shapeSpec
	rng  *rand.Rand
	nss  []string
	uis  [][]byte
	// live lists the documents of each collection that exist; next is the
	// number of the next one inserted.
	live [][]int
	next []int
	doc  []byte
	// tsAt is the offset of the ts value in the last entry built.
	tsAt int
	// shardKey is Input.ShardKey.
	shardKey string
}

// skValue is the shard key value of document n.
func skValue(n int) int32 { return int32(n % 1000) }

// document builds document n of collection c into g.doc, with its shard
// key field last when the collections have one.
func (g *generator) document(c, n int) {
	g.doc = g.spec.doc(g.doc[:0], g.rng, c, n)
	if g.shardKey == "" {
		return
	}
	g.doc = bsoncore.AppendInt32Element(g.doc[:len(g.doc)-1], g.shardKey, skValue(n))
	g.doc = append(g.doc, 0)
	binary.LittleEndian.PutUint32(g.doc, uint32(len(g.doc)))
}

// header appends op, ns and ui: the first fields of a CRUD entry.
func (g *generator) header(dst []byte, op string, c int) []byte {
	dst = bsoncore.AppendStringElement(dst, "op", op)
	dst = bsoncore.AppendStringElement(dst, "ns", g.nss[c])
	return bsoncore.AppendBinaryElement(dst, "ui", 4, g.uis[c])
}

// trailer appends ts, t, v and wall, as a server writes them, and
// records where the ts value is.
func (g *generator) trailer(dst []byte, ts bson.Timestamp, wall time.Time) []byte {
	g.tsAt = len(dst) + len("\x11ts\x00")
	dst = bsoncore.AppendTimestampElement(dst, "ts", ts.T, ts.I)
	dst = bsoncore.AppendInt64Element(dst, "t", 1)
	dst = bsoncore.AppendInt64Element(dst, "v", 2)
	return bsoncore.AppendDateTimeElement(dst, "wall", wall.UnixMilli())
}

func (g *generator) insert(dst []byte, c int, ts bson.Timestamp, wall time.Time) ([]byte, int) {
	n := g.next[c]
	g.next[c]++
	g.live[c] = append(g.live[c], n)
	g.document(c, n)
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = g.header(dst, "i", c)
	dst = bsoncore.AppendDocumentElement(dst, "o", g.doc)
	if g.shardKey != "" {
		dst = g.idDoc(dst, "o2", c, n)
	}
	dst = g.trailer(dst, ts, wall)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, len(g.doc)
}

// insertManyDocs and batchDocs are the size of ShapeInsertMany's
// insertMany and of its batches (mongod writes at most 64 inserts per batched applyOps).
const (
	insertManyDocs = 500
	batchDocs      = 64
)

// batch appends entry i of the pool: batch i%8 of an insertMany into
// collection c, as an applyOps of a retryable write on MongoDB 8.0. It
// returns the entry and its number of inserts.
func (g *generator) batch(dst []byte, c, i int, ts bson.Timestamp, wall time.Time) ([]byte, int) {
	perMany := (insertManyDocs + batchDocs - 1) / batchDocs
	k := i % perMany
	docs := min(batchDocs, insertManyDocs-k*batchDocs)
	idx, dst := bsoncore.AppendDocumentStart(dst)
	var lsid int32
	lsid, dst = bsoncore.AppendDocumentElementStart(dst, "lsid")
	dst = bsoncore.AppendBinaryElement(dst, "id", 4, g.uis[c])
	dst, _ = bsoncore.AppendDocumentEnd(dst, lsid)
	dst = bsoncore.AppendInt64Element(dst, "txnNumber", int64(i/perMany))
	dst = bsoncore.AppendStringElement(dst, "op", "c")
	dst = bsoncore.AppendStringElement(dst, "ns", "admin.$cmd")
	var o, ops int32
	o, dst = bsoncore.AppendDocumentElementStart(dst, "o")
	ops, dst = bsoncore.AppendArrayElementStart(dst, "applyOps")
	for j := range docs {
		n := g.next[c]
		g.next[c]++
		g.document(c, n)
		var op int32
		op, dst = bsoncore.AppendDocumentElementStart(dst, strconv.Itoa(j))
		dst = g.header(dst, "i", c)
		dst = bsoncore.AppendDocumentElement(dst, "o", g.doc)
		dst = g.idDoc(dst, "o2", c, n)
		dst = bsoncore.AppendInt32Element(dst, "stmtId", int32(k*batchDocs+j))
		dst, _ = bsoncore.AppendDocumentEnd(dst, op)
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, ops)
	dst, _ = bsoncore.AppendDocumentEnd(dst, o)
	dst = bsoncore.AppendInt32Element(dst, "multiOpType", 1)
	var prev int32
	prev, dst = bsoncore.AppendDocumentElementStart(dst, "prevOpTime")
	prevTS := bson.Timestamp{}
	if k > 0 {
		prevTS = bson.Timestamp{T: ts.T, I: ts.I - 1} // the previous batch (re-stamped entries keep their form)
	}
	dst = bsoncore.AppendTimestampElement(dst, "ts", prevTS.T, prevTS.I)
	dst = bsoncore.AppendInt64Element(dst, "t", 1)
	dst, _ = bsoncore.AppendDocumentEnd(dst, prev)
	dst = g.trailer(dst, ts, wall)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst, docs
}

// pick returns a live document of collection c; remove takes it out.
func (g *generator) pick(c int, remove bool) int {
	live := g.live[c]
	k := g.rng.IntN(len(live))
	n := live[k]
	if remove {
		live[k] = live[len(live)-1]
		g.live[c] = live[:len(live)-1]
	}
	return n
}

// idDoc appends the document key of document n, {_id: ...} or
// {shardKey: ..., _id: ...}, as an element named key.
func (g *generator) idDoc(dst []byte, key string, c, n int) []byte {
	var idx int32
	idx, dst = bsoncore.AppendDocumentElementStart(dst, key)
	if g.shardKey != "" {
		dst = bsoncore.AppendInt32Element(dst, g.shardKey, skValue(n))
	}
	dst = g.spec.id(dst, c, n)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

func (g *generator) update(dst []byte, c int, ts bson.Timestamp, wall time.Time) []byte {
	n := g.pick(c, false)
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = g.header(dst, "u", c)
	// o: {$v: 2, diff: {u: {field: value}}}
	var o, diff, u int32
	o, dst = bsoncore.AppendDocumentElementStart(dst, "o")
	dst = bsoncore.AppendInt32Element(dst, "$v", 2)
	diff, dst = bsoncore.AppendDocumentElementStart(dst, "diff")
	u, dst = bsoncore.AppendDocumentElementStart(dst, "u")
	dst = g.spec.update(dst, g.rng)
	dst, _ = bsoncore.AppendDocumentEnd(dst, u)
	dst, _ = bsoncore.AppendDocumentEnd(dst, diff)
	dst, _ = bsoncore.AppendDocumentEnd(dst, o)
	dst = g.idDoc(dst, "o2", c, n)
	dst = g.trailer(dst, ts, wall)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

func (g *generator) delete(dst []byte, c int, ts bson.Timestamp, wall time.Time) []byte {
	n := g.pick(c, true)
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = g.header(dst, "d", c)
	dst = g.idDoc(dst, "o", c, n)
	dst = g.trailer(dst, ts, wall)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// letters fill generated strings.
const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// appendRandom appends n random characters, ten per random number.
func appendRandom(dst []byte, rng *rand.Rand, n int) []byte {
	for n > 0 {
		x := rng.Uint64()
		for k := 0; k < 10 && n > 0; k, n = k+1, n-1 {
			dst = append(dst, letters[(x&63)%uint64(len(letters))])
			x >>= 6
		}
	}
	return dst
}

// appendRandomString appends a string element of n random characters.
func appendRandomString(dst []byte, rng *rand.Rand, key string, n int) []byte {
	dst = bsoncore.AppendHeader(dst, bsoncore.TypeString, key)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n+1))
	dst = appendRandom(dst, rng, n)
	return append(dst, 0)
}

// objectIDElem appends _id: an ObjectId made of the collection and n.
func objectIDElem(dst []byte, c, n int) []byte {
	var oid bson.ObjectID
	binary.BigEndian.PutUint32(oid[0:4], uint32(baseTime.Unix()))
	binary.BigEndian.PutUint32(oid[4:8], uint32(c))
	binary.BigEndian.PutUint32(oid[8:12], uint32(n))
	return bsoncore.AppendObjectIDElement(dst, "_id", oid)
}

// ddtDoc is a document of about 140 bytes.
func ddtDoc(dst []byte, rng *rand.Rand, c, n int) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = objectIDElem(dst, c, n)
	dst = appendRandomString(dst, rng, "name", 20)
	dst = bsoncore.AppendInt32Element(dst, "age", int32(18+rng.IntN(60)))
	dst = appendRandomString(dst, rng, "email", 24)
	dst = bsoncore.AppendDoubleElement(dst, "score", rng.Float64()*100)
	dst = bsoncore.AppendDateTimeElement(dst, "created", baseTime.UnixMilli()+int64(n))
	dst = bsoncore.AppendBooleanElement(dst, "active", rng.IntN(2) == 0)
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// ddtUpdate sets one of score, age or name.
func ddtUpdate(dst []byte, rng *rand.Rand) []byte {
	switch rng.IntN(3) {
	case 0:
		return bsoncore.AppendDoubleElement(dst, "score", rng.Float64()*100)
	case 1:
		return bsoncore.AppendInt32Element(dst, "age", int32(18+rng.IntN(60)))
	}
	return appendRandomString(dst, rng, "name", 20)
}

// ycsbFields is YCSB's field count and length.
const (
	ycsbFields      = 10
	ycsbFieldLength = 100
)

var ycsbFieldNames = func() []string {
	out := make([]string, ycsbFields)
	for i := range out {
		out[i] = "field" + strconv.Itoa(i)
	}
	return out
}()

// userKeyElem appends _id: "user%010d".
func userKeyElem(dst []byte, _, n int) []byte {
	key := strconv.Itoa(n)
	for len(key) < 10 {
		key = "0" + key
	}
	return bsoncore.AppendStringElement(dst, "_id", "user"+key)
}

// ycsbDoc is a usertable record: 10 fields of 100 characters.
func ycsbDoc(dst []byte, rng *rand.Rand, c, n int) []byte {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	dst = userKeyElem(dst, c, n)
	for _, f := range ycsbFieldNames {
		dst = appendRandomString(dst, rng, f, ycsbFieldLength)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// ycsbUpdate sets one field to a new value, as YCSB's update does.
func ycsbUpdate(dst []byte, rng *rand.Rand) []byte {
	return appendRandomString(dst, rng, ycsbFieldNames[rng.IntN(ycsbFields)], ycsbFieldLength)
}
