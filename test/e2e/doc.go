// Package e2e runs MongoFerry end to end against real FerretDB servers
// started by internal/testserver: whole tasks through the CLI and the
// engine, and the operator on an envtest control plane with its workers run
// by internal/podrunner; it holds only tests.
package e2e
