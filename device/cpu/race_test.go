//go:build race

package cpu

// The race detector makes sync.Pool drop items and allocates itself.
const raceEnabled = true
