//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/memfit/memfit/device/cuda/internal/cu"

	"github.com/memfit/memfit/device"
)

// PinnedBuffer is page-locked host memory: the data loader fills Bytes and
// CopyAsync moves it to the GPU by DMA on the copy stream, overlapped with
// the kernels of the compute stream. Close frees it. Pinned memory is taken
// from the host, not the GPU, and is not counted by the device's allocator.
type PinnedBuffer struct {
	d      *Device
	mu     sync.Mutex
	p      unsafe.Pointer
	n      int
	done   cu.Event // recorded after the last copy out of the buffer
	copied bool
}

// NewPinned allocates n bytes of page-locked host memory.
func (d *Device) NewPinned(n int) (*PinnedBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: pinned buffer of %d bytes", d.name, n)
	}
	b := &PinnedBuffer{d: d, n: n}
	err := d.w.do(func() error {
		var err error
		if b.p, err = hostAlloc(n); err != nil {
			return err
		}
		if b.done, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return errors.Join(err, hostFree(b.p))
		}
		return nil
	})
	if err != nil {
		return nil, d.wrap("cuMemHostAlloc", err)
	}
	return b, nil
}

// Bytes is the buffer's memory. Do not write it while a copy out of it is
// in flight: call Wait first.
func (b *PinnedBuffer) Bytes() []byte {
	if b == nil || b.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.p), b.n)
}

// Wait blocks until every copy out of the buffer has completed.
func (b *PinnedBuffer) Wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wait()
}

func (b *PinnedBuffer) wait() error {
	if !b.copied {
		return nil
	}
	if err := b.d.w.do(func() error {
		defer b.d.waited("cuEventSynchronize (pinned buffer)", time.Now())
		return b.done.Synchronize()
	}); err != nil {
		return b.d.wrap("cuEventSynchronize", err)
	}
	b.copied = false
	return nil
}

// Close waits for pending copies and frees the buffer.
func (b *PinnedBuffer) Close() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.p == nil {
		return nil
	}
	err := b.wait()
	err = errors.Join(err, b.d.w.do(func() error {
		return errors.Join(hostFree(b.p), cu.DestroyEvent(&b.done))
	}))
	b.p = nil
	return err
}

// CopyAsync queues a copy of n bytes from src at srcOff into dst at byte
// offset off on the copy stream and returns at once. The copy starts after
// the kernels queued before it (dst may be memory the caching allocator
// handed back out while they still use it), kernels queued after it wait
// for it, and src must not be rewritten until src.Wait returns.
func (d *Device) CopyAsync(dst device.Buffer, off int64, src *PinnedBuffer, srcOff, n int64) error {
	if n == 0 {
		return nil
	}
	if srcOff < 0 || n < 0 || srcOff+n > int64(src.n) {
		return fmt.Errorf("%s: copy of bytes [%d, %d) out of a pinned buffer of %d", d.name, srcOff, srcOff+n, src.n)
	}
	if off < 0 || off+n > dst.Block.Requested() {
		return fmt.Errorf("%s: copy of %d bytes at offset %d into a buffer of %d", d.name, n, off, dst.Block.Requested())
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	p := cu.DevicePtr(dst.Block.Ptr()) + cu.DevicePtr(off)
	err := d.w.do(func() error {
		if d.computed == (cu.Event{}) {
			var err error
			if d.computed, err = cu.MakeEvent(cu.DisableTiming); err != nil {
				return err
			}
		}
		if err := d.computed.Record(d.compute); err != nil {
			return err
		}
		if err := d.copies.Wait(d.computed, 0); err != nil {
			return err
		}
		host := unsafe.Add(src.p, srcOff)
		if err := d.timed("HtoD", d.copies, func() error { return cu.MemcpyHtoDAsync(p, host, n, d.copies) }); err != nil {
			return err
		}
		if err := src.done.Record(d.copies); err != nil {
			return err
		}
		return d.compute.Wait(src.done, 0)
	})
	if err != nil {
		return d.wrap("cuMemcpyHtoDAsync", err)
	}
	src.copied = true
	return nil
}

var _ device.HostMemory = (*Device)(nil)

// AllocHost returns n bytes of page-locked host memory (cuMemHostAlloc),
// for a CPU device that holds state offloaded from this GPU
// (cpu.HostMemory): copies between it and the GPU are DMA without a bounce
// through pageable memory. It is taken from the host and not counted by
// this device's allocator (the CPU device's allocator counts it).
func (d *Device) AllocHost(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%s: pinned host memory of %d bytes", d.name, n)
	}
	var p unsafe.Pointer
	if err := d.w.do(func() error {
		var err error
		p, err = hostAlloc(n)
		return err
	}); err != nil {
		return nil, d.wrap("cuMemHostAlloc", err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost frees memory AllocHost returned.
func (d *Device) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	p := unsafe.Pointer(&b[0])
	if err := d.w.do(func() error { return hostFree(p) }); err != nil {
		return d.wrap("cuMemHostFree", err)
	}
	return nil
}
