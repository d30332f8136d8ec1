//go:build linux || darwin || freebsd || netbsd || openbsd

package cpu

import "syscall"

// segmentsFromOS says where device memory comes from, for tests and docs.
const segmentsFromOS = true

// sysAlloc maps size bytes of private anonymous memory: zero-filled,
// page-aligned (so 64-byte alignment holds), and resident only once
// touched. The Go runtime neither scans nor counts it.
func sysAlloc(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

// sysFree unmaps a segment; its pages leave the process's resident set.
func sysFree(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		// Only a slice that is not a whole mapping fails, which would be a
		// bug in hostRaw's bookkeeping.
		panic("cpu: munmap of a device segment: " + err.Error())
	}
}
