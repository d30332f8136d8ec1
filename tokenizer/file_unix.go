//go:build unix

package tokenizer

import (
	"os"
	"syscall"
)

// openFlags opens without blocking: opening a FIFO for reading otherwise
// waits for a writer. Reads of regular files ignore O_NONBLOCK.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
