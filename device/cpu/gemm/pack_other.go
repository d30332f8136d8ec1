//go:build purego || !amd64

package gemm

// fillRows has no vector version here: biasRows loops.
func fillRows(t []float32, ld, rows int, b []float32) bool { return false }
