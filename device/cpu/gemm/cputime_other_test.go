//go:build !linux

package gemm

import "time"

// threadTime has no per-thread clock here: the benchmarks take wall time.
func threadTime() (time.Duration, bool) { return 0, false }
