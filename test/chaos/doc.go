// Package chaos runs a fullAndIncremental task under a live random
// workload between two FerretDB servers and injects faults from a seeded
// schedule, then lets the task catch up and compares the source and the
// target document by document with its own comparator (not ferry verify).
// What stands in for what:
//
//   - the worker is `ferry run` as a child process, restarted after each
//     kill and whenever it exits on its own, as a pod's container would be;
//   - the servers are FerretDB processes (internal/testserver), killed with
//     SIGKILL and restarted on the same storage directory as a crashed
//     mongod restarts on its dbpath;
//   - the network between the worker and each server is a toxiproxy proxy
//     in the test process: latency with jitter, bandwidth limits, resets, a
//     connection that stays open and goes silent, and a partition longer
//     than the driver's timeouts;
//   - a watchdog probes both servers directly (not through the proxies),
//     reports a server that stopped answering while its process lives as a
//     wedged test server, not a MongoFerry fault, and restarts it.
//
// Parts: schedule.go (fault kinds and the seeded schedule), harness.go
// (epochs, cycles and the faults), worker.go (the ferry process), load.go
// (the workload) and shapes.go (its entries of the shapes FerretDB never
// logs: applyOps, transactions, DDL, prepared transactions), compare.go
// (the comparator), watchdog.go and report.go (the figures `make chaos`
// prints).
package chaos
