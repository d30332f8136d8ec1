package gemm

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadTime is the CPU time the calling OS thread has used: on a machine
// shared with other work it measures a single-threaded product without
// the time other processes held the core.
func threadTime() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
