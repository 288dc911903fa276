// Package sharding makes a sharded target collection sharded like the
// source's before the copy writes into it. Parts: Key and Layout, how a
// collection is sharded as config.collections, config.chunks and
// config.tags describe it (layout.go); Read, which reads them through a
// mongos (read.go); Plan, the exact commands that shard, pre-split and
// place a target collection (plan.go); and Preparer, which runs them for
// each collection the copy creates (prepare.go).
package sharding
