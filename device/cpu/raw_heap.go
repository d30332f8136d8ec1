//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package cpu

import "unsafe"

// segmentsFromOS says where device memory comes from, for tests and docs.
const segmentsFromOS = false

// align is the byte alignment of every segment: a cache line, and what
// AVX-512 loads like (segments from the OS are page-aligned, which is
// more).
const align = 64

// sysAlloc returns size bytes of 64-byte-aligned Go memory (zeroed, as a
// mapping would be). hostRaw's segment map keeps it reachable; once freed
// it waits for the garbage collector.
func sysAlloc(size int) ([]byte, error) {
	buf := make([]byte, size+align)
	skip := int((align - uintptr(unsafe.Pointer(&buf[0]))%align) % align)
	return buf[skip : skip+size : skip+size], nil
}

func sysFree([]byte) {}
