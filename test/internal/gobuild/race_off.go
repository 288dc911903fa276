//go:build !race

package gobuild

// raceEnabled is true in a binary built with -race.
const raceEnabled = false
