//go:build race

package gemm

// The race detector makes sync.Pool drop items and allocates itself.
const raceEnabled = true
