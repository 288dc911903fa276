//go:build race

package testutil

// raceFactor is how much slower a test runs with the race detector
// (go test -race, make test-race): several times, more on a loaded host.
const raceFactor = 4
