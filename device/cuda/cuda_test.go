//go:build cuda || cudaemu

package cuda

import (
	"bytes"
	"errors"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/memory"
)

// On a machine without a usable driver this binary never gets here:
// internal/probe prints one line and exits 0 before gorgonia's init runs.

func newTestDevice(t *testing.T, opts ...Option) *Device {
	t.Helper()
	d, err := New(0, opts...)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// TestConformance runs every kernel on the GPU and compares it with the
// float64 reference (device/devicetest).
func TestConformance(t *testing.T) {
	d := newTestDevice(t)
	t.Logf("%s: %s", d.Name(), d.GPU())
	devicetest.Run(t, d)
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestComposedFallbacks runs the suite with the GPU's fused kernels hidden:
// the compositions of its core kernels must agree with the reference too.
func TestComposedFallbacks(t *testing.T) {
	d := newTestDevice(t)
	devicetest.Run(t, device.Without(d))
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestOutOfMemory checks that MemLimit caps the allocator and that running
// out yields a *memory.OOMError naming the device.
func TestOutOfMemory(t *testing.T) {
	d := newTestDevice(t, MemLimit(64<<20))
	b, err := d.Alloc(40<<20, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	_, err = d.Alloc(40<<20, memory.Activation)
	var oom *memory.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("second 40 MiB of 64: %v, want an OOMError", err)
	}
}

// TestPinnedCopy copies through a pinned buffer asynchronously and reads
// the bytes back after a kernel that depends on them.
func TestPinnedCopy(t *testing.T) {
	d := newTestDevice(t)
	const n = 1 << 20
	pb, err := d.NewPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	for i := range pb.Bytes() {
		pb.Bytes()[i] = byte(i * 7)
	}
	src, _ := d.Alloc(n, memory.Data)
	dst, _ := d.Alloc(n, memory.Data)
	defer d.Free(src)
	defer d.Free(dst)
	if err := d.CopyAsync(src, 0, pb, 0, n); err != nil {
		t.Fatal(err)
	}
	v := func(b device.Buffer) device.View {
		return device.View{Buf: b, DType: device.F32, Shape: []int{n / 4}, Strides: []int{1}}
	}
	d.Copy(v(dst), v(src)) // queued after the copy: must see its bytes
	if err := pb.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	d.Read(got, dst, 0)
	if !bytes.Equal(got, pb.Bytes()) {
		t.Error("bytes copied through pinned memory differ")
	}
}

// TestAllocHost: page-locked host memory for a host device (offload):
// writable, copied to the GPU and back exactly, freed without error.
func TestAllocHost(t *testing.T) {
	d := newTestDevice(t)
	const n = 3 << 20
	h, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h {
		h[i] = byte(i * 13)
	}
	b, _ := d.Alloc(n, memory.Activation)
	defer d.Free(b)
	d.Write(b, 0, h)
	back, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	d.Read(back, b, 0)
	if !bytes.Equal(back, h) {
		t.Error("bytes through pinned host memory differ")
	}
	for _, m := range [][]byte{h, back} {
		if err := d.FreeHost(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.AllocHost(0); err == nil {
		t.Error("AllocHost(0): no error")
	}
}

// TestStagedWritesPack makes many writes smaller than a staging buffer,
// as a step's small tables are: they share buffers, so none waits for the
// GPU until the ring's bytes run out, and every one lands.
func TestStagedWritesPack(t *testing.T) {
	d := newTestDevice(t)
	const piece = 3000
	for _, c := range []struct {
		writes, maxWaits int
	}{
		{100, 0},                    // 300 KB: one buffer
		{stageBytes * 6 / piece, 3}, // six buffers' worth: the ring wraps once
	} {
		n := c.writes * piece
		a, _ := d.Alloc(int64(n), memory.Data)
		want := make([]byte, n)
		before := d.stageWaits
		src := make([]byte, piece)
		for w := range c.writes {
			for i := range src {
				src[i] = byte(w*7 + i)
			}
			copy(want[w*piece:], src)
			d.Write(a, int64(w*piece), src)
		}
		waits := d.stageWaits - before
		got := make([]byte, n)
		d.Read(got, a, 0)
		if !bytes.Equal(got, want) {
			t.Errorf("%d writes of %d bytes: bytes differ", c.writes, piece)
		}
		if waits > c.maxWaits {
			t.Errorf("%d writes of %d bytes waited %d times for a staging buffer, want at most %d", c.writes, piece, waits, c.maxWaits)
		}
		d.Free(a)
	}
}

// TestStagedWrite writes more than the staging ring holds, reuses and
// rewrites the host slice at once, and recycles device blocks between
// queued copies and kernels: every read must see exactly what was written,
// in order.
func TestStagedWrite(t *testing.T) {
	d := newTestDevice(t)
	const n = stageBytes*stageCount + 12345 // wraps the ring
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	want := bytes.Clone(src)
	a, _ := d.Alloc(n, memory.Data)
	d.Write(a, 0, src)
	clear(src) // Write has returned: src is ours again
	got := make([]byte, n)
	d.Read(got, a, 0)
	if !bytes.Equal(got, want) {
		t.Fatal("staged write: bytes differ")
	}
	// A kernel reads a; a is freed and handed out again as b, which is
	// written at once. The kernel must still see a's bytes.
	const m = 1 << 16
	v := func(b device.Buffer) device.View {
		return device.View{Buf: b, DType: device.F32, Shape: []int{m / 4}, Strides: []int{1}}
	}
	c, _ := d.Alloc(m, memory.Data)
	d.Copy(v(c), v(a))
	d.Free(a)
	b, _ := d.Alloc(n, memory.Data)
	d.Write(b, 0, make([]byte, n))
	got = make([]byte, m)
	d.Read(got, c, 0)
	if !bytes.Equal(got, want[:m]) {
		t.Error("a write into a recycled block overtook the kernel reading it")
	}
	d.Free(b)
	d.Free(c)
}

// TestCloseReportsLeak checks that Close names memory still allocated.
func TestCloseReportsLeak(t *testing.T) {
	d, err := New(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	if _, err := d.Alloc(1<<10, memory.Other); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err == nil {
		t.Error("Close with a live buffer reported nothing")
	}
}
