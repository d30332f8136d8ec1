//go:build !unix

package regularfile

// nonBlocking: systems without unix's FIFO semantics open as usual.
const nonBlocking = 0
