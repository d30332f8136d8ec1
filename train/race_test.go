//go:build race

package train

// The race detector allocates on the Go heap itself.
const raceEnabled = true
