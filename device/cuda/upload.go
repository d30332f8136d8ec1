//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/memfit/memfit/device/cuda/internal/cu"

	"github.com/memfit/memfit/device"
)

// Uploads: copies from host memory the caller keeps (a frozen weight's
// copy in the pinned memory of AllocHost, streamed to the GPU block by
// block: package offload's Base) on the copy stream, which the compute
// stream waits for only when the caller says the copied bytes are about
// to be used. CopyAsync makes the compute stream wait at once, so the
// kernels queued after it cannot run while it copies; an upload queued
// while a block computes lets that block's kernels run beside it.

// UploadAsync queues a copy of src, host memory, into dst at byte offset
// off on the copy stream, after the work queued on the compute stream
// before it (the caching allocator may have handed dst back out while
// kernels still use it), and returns at once. From page-locked memory
// (AllocHost's) the copy is a DMA that overlaps the kernels; from
// pageable memory the driver copies it before returning. The compute
// stream does not wait for it: AwaitUploads orders the work queued after
// it behind every upload queued before. dst must not be freed before
// AwaitUploads, nor src changed before SyncUploads.
func (d *Device) UploadAsync(dst device.Buffer, off int64, src []byte) error {
	n := int64(len(src))
	if n == 0 {
		return nil
	}
	if off < 0 || off+n > dst.Block.Requested() {
		return fmt.Errorf("%s: upload of %d bytes at offset %d into a buffer of %d", d.name, n, off, dst.Block.Requested())
	}
	p := cu.DevicePtr(dst.Block.Ptr()) + cu.DevicePtr(off)
	err := d.w.do(func() error {
		for _, e := range []*cu.Event{&d.computed, &d.uploaded} {
			if *e == (cu.Event{}) {
				var err error
				if *e, err = cu.MakeEvent(cu.DisableTiming); err != nil {
					return err
				}
			}
		}
		if err := d.computed.Record(d.compute); err != nil {
			return err
		}
		if err := d.copies.Wait(d.computed, 0); err != nil {
			return err
		}
		if err := d.timed("HtoD", d.copies, func() error { return cu.MemcpyHtoDAsync(p, unsafe.Pointer(&src[0]), n, d.copies) }); err != nil {
			return err
		}
		// The copy stream runs in order: the event, recorded again after
		// each upload, follows every upload queued so far.
		return d.uploaded.Record(d.copies)
	})
	if err != nil {
		return d.wrap("cuMemcpyHtoDAsync", err)
	}
	return nil
}

// AwaitUploads makes the work queued on the compute stream from now on
// wait for every upload queued before it (cuStreamWaitEvent); the host
// does not wait.
func (d *Device) AwaitUploads() error {
	err := d.w.do(func() error {
		if d.uploaded == (cu.Event{}) {
			return nil
		}
		return d.compute.Wait(d.uploaded, 0)
	})
	return d.wrap("cuStreamWaitEvent", err)
}

// SyncUploads blocks until every upload queued has run: their host
// memory may change then.
func (d *Device) SyncUploads() error {
	err := d.w.do(func() error {
		if d.uploaded == (cu.Event{}) {
			return nil
		}
		defer d.waited("cuEventSynchronize (uploads)", time.Now())
		return d.uploaded.Synchronize()
	})
	return d.wrap("cuEventSynchronize", err)
}
