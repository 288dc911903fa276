// Package testutil holds small helpers shared by the tests of several
// packages: a free loopback address, a buffer a child process can write
// while the test reads it, a wait on a child process (PollProcess), the
// skip of the unit tier (SkipInShort), and the fields of a task model's
// struct (ModelFields, fields.go).
package testutil

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/freeport"
)

// SkipInShort skips a test under `go test -short`, the unit tier (`make
// test-unit`), when it needs what has to be built or started first: a
// FerretDB server, the envtest control plane or a binary built by the
// test. what names it, for the skip message.
func SkipInShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (the unit tier); make test-integration and make test run it", what)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a server a test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// FreePort returns a port on host that was free a moment ago and that no
// earlier call in this process returned (freeport.Port, shared with the
// FerretDB servers the tests start).
func FreePort(host string) (int, error) { return freeport.Port(host) }

// SyncBuffer is a bytes.Buffer safe to read while a process writes it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PollProcess polls check every 200ms until it returns nil. It fails the
// test when timeout passes, or at once when exited delivers: the process
// under test ended, so the wait can no longer succeed. onExit, when set,
// runs before that failure (a caller notes the process needs no stopping).
func PollProcess(t testing.TB, what string, timeout time.Duration, exited <-chan error, onExit func(), check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case werr := <-exited:
			if onExit != nil {
				onExit()
			}
			t.Fatalf("%s: the process exited (%v); last check: %v", what, werr, err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// Deadline returns d, stretched under the race detector (make test-race),
// which runs a test several times slower: a test's own deadline on work
// it waits for, not a measure of speed.
func Deadline(d time.Duration) time.Duration { return d * raceFactor }
