// Package freeport hands out loopback ports that were free a moment ago,
// each at most once per process: for the FerretDB servers the demo and the
// tests start, and for the other servers tests start beside them.
package freeport

import (
	"net"
	"sync"
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a port on host that was free a moment ago and that no
// earlier call in this process returned: the kernel hands a port just
// released out again, and two servers started by one process must not
// share one.
func Port(host string) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
}
