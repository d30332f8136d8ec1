package memory

import (
	"strings"
	"testing"
)

func TestCountingRaw(t *testing.T) {
	r := NewCountingRaw(10*KiB, "meta")
	if r.Device() != "meta" || r.Capacity() != 10*KiB {
		t.Fatalf("device %q capacity %d", r.Device(), r.Capacity())
	}
	type seg struct {
		p    Ptr
		size int64
	}
	var segs []seg
	for _, size := range []int64{1, 512, 1000, 4096} {
		p, err := r.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if p == 0 || p%512 != 0 {
			t.Fatalf("address %#x not 512-aligned", p)
		}
		for _, s := range segs {
			if p < s.p+Ptr(s.size) && s.p < p+Ptr(size) {
				t.Fatalf("segment %#x+%d overlaps %#x+%d", p, size, s.p, s.size)
			}
		}
		segs = append(segs, seg{p, size})
	}
	if r.Live() != 5609 || r.Segments() != 4 || r.AllocCalls() != 4 {
		t.Fatalf("live %d segments %d calls %d", r.Live(), r.Segments(), r.AllocCalls())
	}
	if _, err := r.Alloc(5 * KiB); err == nil || !strings.Contains(err.Error(), "meta: out of memory") {
		t.Fatalf("over capacity: %v", err)
	}
	if _, err := r.Alloc(0); err == nil {
		t.Fatal("zero-size raw allocation succeeded")
	}
	if r.Failures() != 2 {
		t.Fatalf("failures %d", r.Failures())
	}
	r.Free(segs[3].p)
	if r.Live() != 5609-4096 || r.FreeCalls() != 1 || r.Peak() != 5609 {
		t.Fatalf("after free: live %d frees %d peak %d", r.Live(), r.FreeCalls(), r.Peak())
	}
	if msg := mustPanic(t, func() { r.Free(segs[3].p) }); !strings.Contains(msg, "unknown segment") {
		t.Fatalf("double raw free: %q", msg)
	}
	r.SetCapacity(0)
	if _, err := r.Alloc(GiB); err != nil {
		t.Fatalf("unlimited: %v", err)
	}
	if NewCountingRaw(0, "").Device() != "fake" {
		t.Fatal("default device name")
	}
}
