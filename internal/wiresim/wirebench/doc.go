// Package wirebench measures oplog replay over the wire: the engine's
// real tailer reads a generated oplog from one wiresim server and its
// real replayer writes to another, which acknowledges every write after a
// set delay without storing it. Run does one round and reports the
// rate, the writes per command, the CPU time and the allocations.
//
// It leaves out the servers' own work (storing and indexing documents,
// journaling, replication, write concern) and the network (loopback, no
// TLS, no compression); the servers run in the benchmark's process, so
// their CPU time is counted with the engine's.
package wirebench
