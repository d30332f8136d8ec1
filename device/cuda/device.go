//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/memfit/memfit/device/cuda/internal/cu"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Device is one GPU: its context, streams, cuBLAS handle, kernels and
// caching allocator. Its methods are safe for concurrent use; all GPU work
// is issued, in call order, on one stream.
type Device struct {
	ordinal      int
	name         string // "cuda:0"
	gpu          string // the GPU's own name
	major, minor int
	cfg          config

	w       *worker
	dev     cu.Device
	ctx     cu.CUContext
	compute cu.Stream // every kernel, GEMM and synchronous copy
	copies  cu.Stream // asynchronous copies out of pinned memory
	blas    *blasHandle
	scratch cu.DevicePtr // 16 bytes: AllFinite's flag, then the first bad index position
	// partials holds the partial results of a column reduction split over
	// its rows (partialsBytes, geom.go's colsSplit) until the reduction's
	// second kernel combines them. Like scratch (and cuBLAS's workspace)
	// it is the device's own, outside the caching allocator's accounting,
	// so that plans stay exact to the byte. One buffer serves every
	// reduction: they all run in order on the compute stream.
	partials cu.DevicePtr

	raw *rawAlloc
	mem *memory.Allocator

	// Write's staging ring and CopyAsync's ordering mark; under the worker's lock.
	stages     []stage
	curStage   int
	stageWaits int      // stage's waits for a buffer's copies (for tests)
	computed   cu.Event // recorded on compute before an asynchronous copy
	uploaded   cu.Event // recorded on copies after each UploadAsync (upload.go)

	modOnce sync.Once
	mod     cu.Module
	fns     map[string]cu.Function
	modErr  error
	modLoad ModuleLoad

	prof profiler // StartProfile's marks; under the worker's lock

	closeMu sync.Mutex
	closed  bool
}

var _ device.Device = (*Device)(nil)

// Available reports whether a CUDA device can be opened.
func Available() bool {
	n, err := cu.NumDevices()
	return err == nil && n > 0
}

// New opens GPU ordinal. It fails, without exiting, when there is no such
// GPU or its context, streams or cuBLAS handle cannot be made. Close
// releases everything.
func New(ordinal int, opts ...Option) (*Device, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting GPUs: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: no GPU %d (this machine has %d)", ordinal, n)
	}
	d := &Device{ordinal: ordinal, name: fmt.Sprintf("cuda:%d", ordinal), cfg: newConfig(opts), dev: cu.Device(ordinal)}
	if d.gpu, err = d.dev.Name(); err != nil {
		return nil, d.wrap("cuDeviceGetName", err)
	}
	if d.major, d.minor, err = d.dev.ComputeCapability(); err != nil {
		return nil, d.wrap("compute capability", err)
	}
	var total int64
	d.w, err = startWorker(func() error {
		var err error
		if d.ctx, err = d.dev.RetainPrimaryCtx(); err != nil {
			return d.wrap("cuDevicePrimaryCtxRetain", err)
		}
		if err = cu.SetCurrentContext(d.ctx); err != nil {
			return d.wrap("cuCtxSetCurrent", err)
		}
		if _, total, err = cu.MemInfo(); err != nil {
			return d.wrap("cuMemGetInfo", err)
		}
		// Blocking streams: the synchronous copies of Write and Read, on
		// the legacy default stream, wait for the kernels before them and
		// hold back the kernels after them.
		if d.compute, err = cu.MakeStream(cu.DefaultStream); err != nil {
			return d.wrap("cuStreamCreate", err)
		}
		if d.copies, err = cu.MakeStream(cu.DefaultStream); err != nil {
			return d.wrap("cuStreamCreate", err)
		}
		if d.blas, err = newBlas(d.compute); err != nil {
			return d.wrap("cublasCreate", err)
		}
		if d.scratch, err = cu.MemAlloc(16); err != nil {
			return d.wrap("cuMemAlloc", err)
		}
		if err = cu.Track(d.scratch, 16); err != nil {
			return d.wrap("track scratch", err)
		}
		if d.partials, err = cu.MemAlloc(partialsBytes); err != nil {
			return d.wrap("cuMemAlloc", err)
		}
		if err = cu.Track(d.partials, partialsBytes); err != nil {
			return d.wrap("track partials", err)
		}
		return nil
	}, func() error { return cu.SetCurrentContext(d.ctx) }, d.release)
	if err != nil {
		return nil, err
	}
	capacity := total
	if d.cfg.limit > 0 {
		capacity = min(d.cfg.limit, total)
	}
	d.raw = &rawAlloc{d: d, capacity: capacity, sizes: make(map[memory.Ptr]int64)}
	d.mem = memory.New(d.raw)
	return d, nil
}

// release frees what the worker's init made, with the context current, at
// Close or after a failed New.
func (d *Device) release() error {
	var errs []error
	if d.mod != (cu.Module{}) {
		errs = append(errs, d.mod.Unload())
		d.mod = cu.Module{}
	}
	for i := range d.stages {
		s := &d.stages[i]
		errs = append(errs, hostFree(s.host), cu.DestroyEvent(&s.done))
	}
	d.stages = nil
	errs = append(errs, d.prof.destroy())
	if d.computed != (cu.Event{}) {
		errs = append(errs, cu.DestroyEvent(&d.computed))
	}
	if d.uploaded != (cu.Event{}) {
		errs = append(errs, cu.DestroyEvent(&d.uploaded))
	}
	if d.scratch != 0 {
		errs = append(errs, cu.MemFree(d.scratch))
		d.scratch = 0
	}
	if d.partials != 0 {
		errs = append(errs, cu.MemFree(d.partials))
		d.partials = 0
	}
	errs = append(errs, d.blas.close())
	d.blas = nil
	for _, s := range []*cu.Stream{&d.compute, &d.copies} {
		if *s != (cu.Stream{}) {
			errs = append(errs, s.Destroy())
		}
	}
	if d.ctx != (cu.CUContext{}) {
		errs = append(errs, d.dev.ReleasePrimaryCtx())
		d.ctx = cu.CUContext{}
	}
	return errors.Join(errs...)
}

// Close waits for the GPU, returns every cached segment and releases the
// device's streams, cuBLAS handle and context. Memory still allocated is
// freed too, and reported in the error: that is a leak in the caller.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	errs = append(errs, d.w.do(func() error { return d.compute.Synchronize() }))
	if live := d.mem.Allocated(); live > 0 {
		errs = append(errs, fmt.Errorf("%s: closed with %s still allocated", d.name, memory.FormatBytes(live)))
	}
	d.mem.EmptyCache()
	errs = append(errs, d.raw.freeAll())
	errs = append(errs, d.w.stop())
	return errors.Join(errs...)
}

// Name is "cuda:N".
func (d *Device) Name() string { return d.name }

// GPU is the GPU's model name and compute capability, as in
// "NVIDIA H100 80GB HBM3 (sm_90)".
func (d *Device) GPU() string { return fmt.Sprintf("%s (sm_%d%d)", d.gpu, d.major, d.minor) }

// Memory returns the device's caching allocator.
func (d *Device) Memory() *memory.Allocator { return d.mem }

// Alloc returns size bytes of GPU memory tagged with cat.
func (d *Device) Alloc(size int64, cat memory.Category) (device.Buffer, error) {
	b, err := d.mem.Alloc(size, cat)
	if err != nil {
		return device.Buffer{}, err
	}
	// The emulator checks kernels' accesses against the live buffers.
	if err := cu.Track(cu.DevicePtr(b.Ptr()), b.Requested()); err != nil {
		d.mem.Free(b)
		return device.Buffer{}, d.wrap("track allocation", err)
	}
	return device.Buffer{Block: b}, nil
}

// Free returns a buffer to the cache. Work already queued on the buffer
// completes first: the stream runs in order.
func (d *Device) Free(b device.Buffer) {
	cu.Untrack(cu.DevicePtr(b.Block.Ptr()))
	d.mem.Free(b.Block)
}

// Write copies host bytes into dst at byte offset off. It returns when src
// may be reused, usually before the copy has run: src goes through a ring
// of pinned staging buffers, and the copy is queued on the compute stream
// after the kernels before it (the caching allocator may have handed dst
// back out while they still read it), so the host goes on preparing the
// next batch while the GPU works. Without pinned memory it copies
// synchronously.
func (d *Device) Write(dst device.Buffer, off int64, src []byte) {
	if len(src) == 0 {
		return
	}
	p := cu.DevicePtr(dst.Block.Ptr()) + cu.DevicePtr(off)
	d.must("cuMemcpyHtoDAsync", d.w.do(func() error {
		for len(src) > 0 {
			n := min(len(src), stageBytes)
			s, err := d.stage(n)
			if err != nil {
				return err
			}
			if s == nil {
				defer d.waited("cuMemcpyHtoD (Write, unpinned)", time.Now())
				return d.timed("HtoD", d.compute, func() error { return cu.MemcpyHtoD(p, unsafe.Pointer(&src[0]), int64(len(src))) })
			}
			host := unsafe.Add(s.host, s.used)
			copy(unsafe.Slice((*byte)(host), n), src[:n])
			if err := d.timed("HtoD", d.compute, func() error { return cu.MemcpyHtoDAsync(p, host, int64(n), d.compute) }); err != nil {
				return err
			}
			// The event now follows every copy out of s (one stream: in
			// order), so waiting for it frees the whole buffer.
			if err := s.done.Record(d.compute); err != nil {
				return err
			}
			s.pending = true
			s.used += n
			src, p = src[n:], p+cu.DevicePtr(n)
		}
		return nil
	}))
}

// Write's staging: stageCount pinned buffers of stageBytes, used in turn,
// each filled by as many writes as fit before the next is taken (a write
// waits only when it takes a buffer whose copies have not all run). A
// batch larger than one buffer goes through several. Small writes packed
// this way keep up to stageCount·stageBytes of copies queued behind the
// kernels: given a buffer each, the fifth write of a step's small tables
// waited for the GPU to reach the first, and the host could not run
// ahead of it.
const (
	stageBytes = 4 << 20
	stageCount = 4
)

type stage struct {
	host    unsafe.Pointer
	done    cu.Event // recorded after the last copy out of host
	pending bool
	used    int // bytes of host handed to copies since the buffer was last free
}

// stage returns a staging buffer with n free bytes (n ≤ stageBytes) at
// its used offset: the current one while it has room, else the next once
// its copies have finished, making the ring at first use; nil when pinned
// memory is not available. It runs with the worker's lock held.
func (d *Device) stage(n int) (*stage, error) {
	if d.stages == nil {
		d.stages = make([]stage, 0, stageCount)
		for range stageCount {
			host, err := hostAlloc(stageBytes)
			if err != nil {
				break // page-locked memory is limited (ulimit -l): copy synchronously
			}
			ev, err := cu.MakeEvent(cu.DisableTiming)
			if err != nil {
				return nil, errors.Join(err, hostFree(host))
			}
			d.stages = append(d.stages, stage{host: host, done: ev})
		}
	}
	if len(d.stages) == 0 {
		return nil, nil
	}
	s := &d.stages[d.curStage]
	if s.used+n <= stageBytes {
		return s, nil
	}
	d.curStage = (d.curStage + 1) % len(d.stages)
	s = &d.stages[d.curStage]
	if s.pending {
		d.stageWaits++
		defer d.waited("cuEventSynchronize (Write's staging)", time.Now())
		if err := s.done.Synchronize(); err != nil {
			return nil, err
		}
		s.pending = false
	}
	s.used = 0
	return s, nil
}

// Read copies bytes of src at byte offset off into dst, after every kernel
// queued before it.
func (d *Device) Read(dst []byte, src device.Buffer, off int64) {
	if len(dst) == 0 {
		return
	}
	p := cu.DevicePtr(src.Block.Ptr()) + cu.DevicePtr(off)
	d.must("cuMemcpyDtoH", d.w.do(func() error { return d.readBack(unsafe.Pointer(&dst[0]), p, int64(len(dst))) }))
}

// readBack copies n bytes of device memory at src to the host, after the
// work queued before it: the host waits. It runs under the worker's lock.
func (d *Device) readBack(dst unsafe.Pointer, src cu.DevicePtr, n int64) error {
	defer d.waited("cuMemcpyDtoH", time.Now())
	return d.timed("DtoH", d.compute, func() error { return cu.MemcpyDtoH(dst, src, n) })
}

// memset fills n 32-bit words at p with v on the compute stream. It runs
// under the worker's lock.
func (d *Device) memset(p cu.DevicePtr, v uint, n int64) error {
	return d.timed("memset", d.compute, func() error { return cu.MemsetD32Async(p, v, n, d.compute) })
}

// OnStream runs fn on the thread that holds the device's context, giving it
// the compute stream (a CUstream, which is a cudaStream_t) on which all of
// the device's work is ordered: the way for a library that queues its own
// GPU work, such as NCCL, to stay in order with the device's kernels and
// allocator. fn must not call the device's methods (they run on the same
// thread) and should queue work on that stream only.
func (d *Device) OnStream(fn func(stream unsafe.Pointer) error) error {
	return d.w.do(func() error { return fn(unsafe.Pointer(cStream(d.compute))) })
}

// Ordinal is the GPU's index.
func (d *Device) Ordinal() int { return d.ordinal }

// Synchronize waits until the GPU has finished all queued work and returns
// the first error of that work.
func (d *Device) Synchronize() error {
	if err := d.w.do(func() error {
		defer d.waited("cuStreamSynchronize", time.Now())
		return d.compute.Synchronize()
	}); err != nil {
		return d.wrap("cuStreamSynchronize", err)
	}
	return nil
}

func (d *Device) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Device: d.name, Op: op, Err: err}
}

// must panics with an *Error when err is not nil: the kernels' way to fail.
func (d *Device) must(op string, err error) {
	if err != nil {
		panic(d.wrap(op, err))
	}
}

// worker serialises the device's driver calls. Each runs on the calling
// goroutine, its OS thread locked for the call and the device's context
// made current on it first (cuCtxSetCurrent sets a thread-local pointer):
// a thread of its own that every call was handed to and back from cost
// two goroutine wake-ups a call, some 10–20 µs, more than launching a
// kernel, and a training step makes hundreds of calls.
type worker struct {
	mu    sync.Mutex
	bind  func() error // makes the context current on this thread
	fini  func() error
	alive bool
}

// startWorker runs init on a locked thread (it makes the context that
// bind makes current); when init fails, fini runs too.
func startWorker(init, bind, fini func() error) (*worker, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := init(); err != nil {
		return nil, errors.Join(err, fini())
	}
	return &worker{bind: bind, fini: fini, alive: true}, nil
}

// do runs fn with the device's context current and returns its error.
func (w *worker) do(fn func() error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.alive {
		return errors.New("device is closed")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.bind(); err != nil {
		return err
	}
	return fn()
}

// stop runs fini and closes the worker to further calls.
func (w *worker) stop() error {
	err := w.do(w.fini)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.alive = false
	return err
}

// rawAlloc is the memory under the caching allocator: cuMemAlloc and
// cuMemFree, refusing to exceed capacity.
type rawAlloc struct {
	d        *Device
	mu       sync.Mutex
	capacity int64
	used     int64
	sizes    map[memory.Ptr]int64
}

func (r *rawAlloc) Alloc(size int64) (memory.Ptr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.capacity > 0 && r.used+size > r.capacity {
		return 0, fmt.Errorf("%s: %s requested, %s of %s in use", r.d.name, memory.FormatBytes(size), memory.FormatBytes(r.used), memory.FormatBytes(r.capacity))
	}
	var p cu.DevicePtr
	err := r.d.w.do(func() error {
		var err error
		p, err = cu.MemAlloc(size)
		return err
	})
	if err != nil {
		return 0, r.d.wrap("cuMemAlloc", err)
	}
	r.sizes[memory.Ptr(p)] = size
	r.used += size
	return memory.Ptr(p), nil
}

func (r *rawAlloc) Free(p memory.Ptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size, ok := r.sizes[p]
	if !ok {
		panic(fmt.Sprintf("%s: free of unknown segment %#x", r.d.name, uintptr(p)))
	}
	r.d.must("cuMemFree", r.d.w.do(func() error { return cu.MemFree(cu.DevicePtr(p)) }))
	delete(r.sizes, p)
	r.used -= size
}

// freeAll returns every segment still held (at Close).
func (r *rawAlloc) freeAll() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for p, size := range r.sizes {
		errs = append(errs, r.d.w.do(func() error { return cu.MemFree(cu.DevicePtr(p)) }))
		delete(r.sizes, p)
		r.used -= size
	}
	return errors.Join(errs...)
}

func (r *rawAlloc) Capacity() int64 { return r.capacity }
func (r *rawAlloc) Device() string  { return r.d.name }
