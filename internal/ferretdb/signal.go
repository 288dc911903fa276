package ferretdb

import "os"

// Signal sends sig to the server's process: a test makes the server
// unreachable without closing its connections with SIGSTOP (a host that
// stops answering), and brings it back with SIGCONT.
func (s *Server) Signal(sig os.Signal) error {
	return s.cmd.Process.Signal(sig)
}
