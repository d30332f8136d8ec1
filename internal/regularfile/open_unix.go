//go:build unix

package regularfile

import "syscall"

// nonBlocking opens without blocking: opening a FIFO for reading waits for
// a writer, and one may be put in a file's place between the stat and the
// open. Reads of regular files ignore it.
const nonBlocking = syscall.O_NONBLOCK
