// Package rangelease lets several workers copy one collection's _id
// ranges: a worker claims a range by inserting its lease (one document
// per range and attempt, so that of concurrent claimants exactly one
// insert succeeds, on any server: no transaction and no atomic
// read-modify-write are needed), renews it while it copies, and records
// the range done once (one more unique insert). A lease whose holder
// stops renewing (a killed worker) is taken over, as the next attempt,
// by a worker that saw it unrenewed for the TTL on its own clock.
// docs/sharded.md, "Per-shard copy", says where it fits.
package rangelease
