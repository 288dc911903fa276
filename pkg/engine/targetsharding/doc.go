// Package targetsharding makes a sharded target collection sharded like the
// source's before the copy writes into it, and tells which target shard
// owns a document of a collection it placed. Parts: Key and Layout, how a
// collection is sharded as config.collections, config.chunks and
// config.tags describe it (layout.go); Read, which reads them through a
// mongos (read.go); Plan, the exact commands that shard, pre-split and
// place a target collection (plan.go); and Preparer, which runs them for
// each collection the copy creates (prepare.go); and Router, which splits
// a batch by owning shard where a Plan placed the chunks (route.go).
package targetsharding
