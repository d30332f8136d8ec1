package cpu

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/memfit/memfit/internal/procmem"
	"github.com/memfit/memfit/memory"
)

// TestEmptyCacheReturnsMemory: with segments from the OS, the resident set
// falls as soon as the allocator releases a segment, with no garbage
// collection in between (issue 19), and a fresh segment reads as zeros.
func TestEmptyCacheReturnsMemory(t *testing.T) {
	if !segmentsFromOS {
		t.Skip("segments are Go memory on this system")
	}
	if _, ok := procmem.RSS(); !ok {
		t.Skip("the system does not report the resident set")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection may help
	d := New()
	const n = 64 << 20
	b, err := d.Alloc(n, memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4096 {
		if b.Host[i] != 0 {
			t.Fatalf("byte %d of a fresh segment is %d", i, b.Host[i])
		}
		b.Host[i] = 1
	}
	touched, _ := procmem.RSS()
	d.Free(b)
	d.Memory().EmptyCache()
	after, _ := procmem.RSS()
	t.Logf("RSS %d MiB with the segment touched, %d MiB after EmptyCache", touched>>20, after>>20)
	if touched-after < n*9/10 {
		t.Errorf("EmptyCache gave back %d bytes of a %d-byte segment", touched-after, n)
	}
	runtime.KeepAlive(d)
}
