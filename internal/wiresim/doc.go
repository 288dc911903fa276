// Package wiresim is an in-process server that speaks enough of the
// MongoDB wire protocol for the Go driver, the engine's tailer and its
// replayer: a benchmark fixture that puts real round trips between the
// engine and its servers, serving a generated local.oplog.rs and
// acknowledging writes after a set delay without storing them. Nobody
// should run it as a database. WriteBlockProxy adds setUserWriteBlockMode
// in front of a real server. What it answers and leaves out:
// docs/architecture.md, "The wire-protocol stand-in".
package wiresim
