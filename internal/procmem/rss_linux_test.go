package procmem

import (
	"os"
	"syscall"
	"testing"
)

// TestPeakRSSFollowsTouchedMemory: touching 64 MiB raises the peak by
// about that much, and a reset brings the peak back to the current RSS.
func TestPeakRSSFollowsTouchedMemory(t *testing.T) {
	if _, err := os.Stat(statusPath); err != nil {
		t.Skip("no /proc/self/status")
	}
	if !ResetPeakRSS() {
		t.Skip("cannot reset VmHWM (clear_refs not writable)")
	}
	before, _ := PeakRSS()
	const n = 64 << 20
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	peak, _ := PeakRSS()
	if err := syscall.Munmap(b); err != nil {
		t.Fatal(err)
	}
	if peak-before < n*9/10 {
		t.Errorf("peak RSS rose by %d bytes after touching %d", peak-before, n)
	}
	ResetPeakRSS()
	after, _ := PeakRSS()
	now, _ := RSS()
	if after >= peak-n/2 || after > now+(4<<20) {
		t.Errorf("after munmap and reset the peak is %d (was %d, RSS now %d)", after, peak, now)
	}
}
