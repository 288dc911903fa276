// Package workload generates YCSB-style load against a MongoDB-protocol
// server: Load inserts the initial records, Run executes a read/update/
// insert/delete mix over them, InsertManyBaseline is the plain bulk loader a
// copy benchmark is compared with; Zipfian and GenerateDocument are the
// key and document generators they share.
package workload
