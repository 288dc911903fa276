//go:build !race

package testutil

// raceFactor is 1 without the race detector.
const raceFactor = 1
