package oplog

import (
	"hash/maphash"
	"sync/atomic"
)

// nsTable interns namespace strings: an oplog names few namespaces over and
// over, so parsing an entry mostly finds its namespace here instead of
// allocating it again. A fixed table of slots, each holding the last name
// that hashed to it, safe for concurrent parsers: a miss allocates, as
// without the table.
var (
	nsTable [512]atomic.Pointer[string]
	nsSeed  = maphash.MakeSeed()
)

// intern returns b as a string, shared with earlier entries of the same
// namespace where the table holds it.
func intern(b []byte) string {
	slot := &nsTable[maphash.Bytes(nsSeed, b)%uint64(len(nsTable))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
