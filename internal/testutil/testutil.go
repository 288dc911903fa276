// Package testutil holds small helpers shared by the tests of several
// packages: a free loopback address, and a buffer a child process can write
// while the test reads it.
package testutil

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a server a test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

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
