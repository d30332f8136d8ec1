package cpu

import (
	"testing"

	"github.com/memfit/memfit/memory"
)

// countingHost stands in for a GPU's pinned host memory.
type countingHost struct{ allocs, frees, live int }

func (c *countingHost) AllocHost(n int) ([]byte, error) {
	c.allocs++
	c.live += n
	return make([]byte, n), nil
}

func (c *countingHost) FreeHost(b []byte) error {
	c.frees++
	c.live -= len(b)
	return nil
}

// TestHostMemoryOption: a device built on a HostMemory takes every
// segment from it and gives each back when the cache is emptied.
func TestHostMemoryOption(t *testing.T) {
	h := &countingHost{}
	d := New(HostMemory(h))
	small, err := d.Alloc(1000, memory.Other)
	if err != nil {
		t.Fatal(err)
	}
	large, err := d.Alloc(3<<20, memory.Other)
	if err != nil {
		t.Fatal(err)
	}
	small.Host[999], large.Host[3<<20-1] = 1, 2 // addressable
	d.Free(small)
	d.Free(large)
	d.Memory().EmptyCache()
	if h.allocs != 2 || h.frees != 2 || h.live != 0 {
		t.Errorf("segments from the host memory: %d allocated, %d freed, %d bytes live; want 2, 2, 0", h.allocs, h.frees, h.live)
	}
}
