package testutil

import "testing"

// Two servers a test starts one after the other must not be given the same
// port, even though the kernel hands a port just released out again.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		port, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
