package wiresim

import (
	"encoding/binary"
	"fmt"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
)

// Oplog is the local.oplog.rs a Server serves: Len entries in ts order.
// Entries are built on demand, so an oplog of millions of entries costs
// no memory beyond what it is built from.
type Oplog interface {
	// Len is the number of entries.
	Len() int64
	// TS returns entry k's ts; it grows with k.
	TS(k int64) bson.Timestamp
	// AppendEntry appends entry k (from 0) to dst.
	AppendEntry(dst []byte, k int64) []byte
	// NS returns entry k's ns, for the tailer's filter on databases.
	NS(k int64) string
}

// GeneratedOplog serves ops entries of a generated pool as replaybench's
// Reader serves them: entry k is pool entry k mod len(pool) with ts
// in.TS(k), so a tailer reading the whole oplog replays exactly what
// `ferry bench replay` replays in memory.
func GeneratedOplog(in *replaybench.Input, ops int64) (Oplog, error) {
	g := &generated{in: in, ops: ops, tsAt: make([]int, len(in.Entries)), ns: make([]string, len(in.Entries))}
	for i, e := range in.Entries {
		at, err := valueOffset(e, "ts")
		if err != nil {
			return nil, fmt.Errorf("pool entry %d: %w", i, err)
		}
		g.tsAt[i] = at
		g.ns[i], _ = bson.Raw(e).Lookup("ns").StringValueOK()
	}
	return g, nil
}

type generated struct {
	in   *replaybench.Input
	ops  int64
	tsAt []int
	ns   []string
}

func (g *generated) Len() int64                { return g.ops }
func (g *generated) TS(k int64) bson.Timestamp { return g.in.TS(k) }
func (g *generated) NS(k int64) string         { return g.ns[k%int64(len(g.ns))] }

func (g *generated) AppendEntry(dst []byte, k int64) []byte {
	i := k % int64(len(g.in.Entries))
	start := len(dst)
	dst = append(dst, g.in.Entries[i]...)
	ts := g.in.TS(k)
	at := start + g.tsAt[i]
	// A BSON timestamp is the increment, then the seconds.
	binary.LittleEndian.PutUint32(dst[at:], ts.I)
	binary.LittleEndian.PutUint32(dst[at+4:], ts.T)
	return dst
}

// valueOffset returns the offset in doc of the value of its top-level
// field key.
func valueOffset(doc []byte, key string) (int, error) {
	if len(doc) < 5 {
		return 0, fmt.Errorf("document of %d bytes", len(doc))
	}
	rest := doc[4 : len(doc)-1]
	for len(rest) > 0 {
		elem, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			return 0, fmt.Errorf("malformed element at offset %d", len(doc)-1-len(rest))
		}
		if elem.Key() == key {
			return len(doc) - 1 - len(rest) + 1 + len(key) + 1, nil
		}
		rest = next
	}
	return 0, fmt.Errorf("no %s field", key)
}

// RawOplog serves entries held in memory, each with a ts field, in ts
// order: for tests.
type RawOplog []bson.Raw

// Len implements Oplog.
func (o RawOplog) Len() int64 { return int64(len(o)) }

// TS implements Oplog.
func (o RawOplog) TS(k int64) bson.Timestamp {
	t, i, _ := o[k].Lookup("ts").TimestampOK()
	return bson.Timestamp{T: t, I: i}
}

// AppendEntry implements Oplog.
func (o RawOplog) AppendEntry(dst []byte, k int64) []byte { return append(dst, o[k]...) }

// NS implements Oplog.
func (o RawOplog) NS(k int64) string { s, _ := o[k].Lookup("ns").StringValueOK(); return s }

// search returns the first entry below n whose ts is after ts (at or
// after it when inclusive): n when there is none.
func search(o Oplog, n int64, ts bson.Timestamp, inclusive bool) int64 {
	return int64(sort.Search(int(n), func(k int) bool {
		c := o.TS(int64(k)).Compare(ts)
		return c > 0 || (inclusive && c == 0)
	}))
}
