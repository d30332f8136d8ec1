//go:build cudaemu

package cu

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "emu.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"
)

// The emulator's handles: device memory addresses are host addresses;
// contexts, streams and events are tokens (every call completes before it
// returns, so there is nothing to wait for); modules and functions point
// at the runtime's records.
type (
	DevicePtr   uintptr
	Device      int
	CUContext   struct{ h uintptr }
	Stream      struct{ h uintptr }
	Event       struct{ h uintptr }
	Module      struct{ h uint64 }
	Function    struct{ h uint64 }
	StreamFlags byte
	EventFlags  byte
)

const DefaultStream StreamFlags = 0

const (
	R32F  DataType = C.EMU_R_32F
	R64F  DataType = C.EMU_R_64F
	R16F  DataType = C.EMU_R_16F
	R16BF DataType = C.EMU_R_16BF

	Compute32F         ComputeType = C.EMU_COMPUTE_32F
	Compute32FFastTF32 ComputeType = C.EMU_COMPUTE_32F_FAST_TF32
	Compute64F         ComputeType = C.EMU_COMPUTE_64F
)

// Result is a CUresult the emulator returned, with its explanation.
type Result struct {
	Code    int
	Message string
}

var resultNames = map[int]string{
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	200: "CUDA_ERROR_INVALID_IMAGE",
	218: "CUDA_ERROR_INVALID_PTX",
	400: "CUDA_ERROR_INVALID_HANDLE",
	600: "CUDA_ERROR_NOT_READY",
	500: "CUDA_ERROR_NOT_FOUND",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	719: "CUDA_ERROR_LAUNCH_FAILED",
}

func (r *Result) Error() string {
	name := resultNames[r.Code]
	if name == "" {
		name = "CUresult"
	}
	if r.Message == "" {
		return fmt.Sprintf("%s (%d) [CUDA emulator]", name, r.Code)
	}
	return fmt.Sprintf("%s (%d) [CUDA emulator]: %s", name, r.Code, r.Message)
}

// mu orders the calls that read the runtime's last message.
var mu sync.Mutex

func result(code C.int) error {
	if code == C.CUDA_SUCCESS {
		return nil
	}
	return &Result{Code: int(code), Message: C.GoString(C.memfit_emu_message())}
}

func init() {
	// MEMFIT_CUDAEMU_BYTES sets the emulated GPU's memory (default 4 GiB).
	if s := os.Getenv("MEMFIT_CUDAEMU_BYTES"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
			C.memfit_emu_total = C.uint64_t(n)
		}
	}
}

// NumDevices is 1: the emulator is one GPU.
func NumDevices() (int, error) { return 1, nil }

// Name is the emulated GPU's name.
func (d Device) Name() (string, error) {
	if d != 0 {
		return "", &Result{Code: 101, Message: "no such device"}
	}
	return "memfit CUDA emulator", nil
}

// ComputeCapability is 8.0: bf16 GEMMs, TF32 and mma.sync on bf16 and f16
// (kernel.h's memfit_mma_m16n8k16) are available.
func (d Device) ComputeCapability() (major, minor int, err error) { return 8, 0, nil }

// RetainPrimaryCtx returns the device's one context.
func (d Device) RetainPrimaryCtx() (CUContext, error) { return CUContext{1}, nil }

// ReleasePrimaryCtx does nothing.
func (d Device) ReleasePrimaryCtx() error { return nil }

// SetCurrentContext does nothing: there is one context.
func SetCurrentContext(CUContext) error { return nil }

// MemInfo is the emulated memory's free and total bytes.
func MemInfo() (free, total int64, err error) {
	var f, t C.uint64_t
	C.memfit_emu_mem_info(&f, &t)
	return int64(f), int64(t), nil
}

// MemAlloc returns n bytes of emulated device memory between guard pages.
func MemAlloc(n int64) (DevicePtr, error) {
	if n < 0 {
		return 0, &Result{Code: 1, Message: "negative size"}
	}
	mu.Lock()
	defer mu.Unlock()
	var p C.uint64_t
	if err := result(C.memfit_emu_mem_alloc(&p, C.uint64_t(n))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree frees what MemAlloc returned, and the allocations tracked in it.
func MemFree(p DevicePtr) error {
	mu.Lock()
	defer mu.Unlock()
	return result(C.memfit_emu_mem_free(C.uint64_t(p)))
}

// Track records [p, p+n) as a live allocation: kernels and GEMMs may
// access it until Untrack.
func Track(p DevicePtr, n int64) error {
	mu.Lock()
	defer mu.Unlock()
	return result(C.memfit_emu_track(C.uint64_t(p), C.uint64_t(n)))
}

// Untrack ends what Track began.
func Untrack(p DevicePtr) { C.memfit_emu_untrack(C.uint64_t(p)) }

func memcpy(dst, src uintptr, n int64, dstDev, srcDev bool) error {
	if n < 0 {
		return &Result{Code: 1, Message: "negative size"}
	}
	mu.Lock()
	defer mu.Unlock()
	return result(C.memfit_emu_memcpy(C.uint64_t(dst), C.uint64_t(src), C.uint64_t(n), cbool(dstDev), cbool(srcDev)))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// MemcpyHtoD copies host memory to device memory.
func MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, n int64) error {
	return memcpy(uintptr(dst), uintptr(src), n, true, false)
}

// MemcpyDtoH copies device memory to host memory.
func MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, n int64) error {
	return memcpy(uintptr(dst), uintptr(src), n, false, true)
}

// MemcpyHtoDAsync copies at once: the emulator's streams are synchronous.
func MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int64, _ Stream) error {
	return MemcpyHtoD(dst, src, n)
}

// MemsetD32Async sets n 32-bit words at once.
func MemsetD32Async(dst DevicePtr, v uint, n int64, _ Stream) error {
	if n < 0 {
		return &Result{Code: 1, Message: "negative count"}
	}
	mu.Lock()
	defer mu.Unlock()
	return result(C.memfit_emu_memset32(C.uint64_t(dst), C.uint32_t(v), C.uint64_t(n)))
}

var token struct {
	sync.Mutex
	next uintptr
}

func newToken() uintptr {
	token.Lock()
	defer token.Unlock()
	token.next++
	return token.next
}

// MakeStream returns a stream. Work on it completes before the call that
// queues it returns.
func MakeStream(StreamFlags) (Stream, error) { return Stream{newToken()}, nil }

// Destroy ends the stream.
func (s *Stream) Destroy() error {
	if s.h == 0 {
		return &Result{Code: 400, Message: "destroy of a stream that does not exist"}
	}
	s.h = 0
	return nil
}

// Synchronize returns at once: the stream's work is done.
func (s Stream) Synchronize() error { return nil }

// Wait returns at once: the event's work is done.
func (s Stream) Wait(Event, uint) error { return nil }

const (
	DefaultEvent  EventFlags = 0
	DisableTiming EventFlags = 2
)

// MakeEvent returns an event.
func MakeEvent(EventFlags) (Event, error) { return Event{newToken()}, nil }

// DestroyEvent ends the event.
func DestroyEvent(e *Event) error {
	if e.h == 0 {
		return &Result{Code: 400, Message: "destroy of an event that does not exist"}
	}
	recorded.Lock()
	delete(recorded.at, e.h)
	recorded.Unlock()
	e.h = 0
	return nil
}

// recorded holds each event's time of its latest Record: the work queued
// before it has completed by then, since every call completes before it
// returns, so the emulator's event times are the emulated work's own.
var recorded struct {
	sync.Mutex
	at map[uintptr]time.Time
}

// Record marks the event, completed at once, at the time of the call.
func (e Event) Record(Stream) error {
	if e.h == 0 {
		return &Result{Code: 400, Message: "record of an event that does not exist"}
	}
	recorded.Lock()
	defer recorded.Unlock()
	if recorded.at == nil {
		recorded.at = make(map[uintptr]time.Time)
	}
	recorded.at[e.h] = time.Now()
	return nil
}

// Elapsed is the milliseconds from e's Record to end's, as
// cuEventElapsedTime; an event never recorded is an error, as there.
func (e Event) Elapsed(end Event) (float64, error) {
	recorded.Lock()
	defer recorded.Unlock()
	t0, ok0 := recorded.at[e.h]
	t1, ok1 := recorded.at[end.h]
	if !ok0 || !ok1 {
		return 0, &Result{Code: 600, Message: "elapsed time of an event not recorded"}
	}
	return float64(t1.Sub(t0)) / 1e6, nil
}

// Synchronize returns at once.
func (e Event) Synchronize() error { return nil }

// StreamHandle is the stream's token.
func StreamHandle(s Stream) unsafe.Pointer { return unsafe.Pointer(&s.h) }

// imagePrefix marks the images CompileKernels makes: the path of a shared
// library, in place of PTX.
const imagePrefix = "memfit-cudaemu-module:"

// LoadData loads a module image made by CompileKernels.
func LoadData(image string) (Module, error) {
	if len(image) <= len(imagePrefix) || image[:len(imagePrefix)] != imagePrefix {
		return Module{}, &Result{Code: 200, Message: "not an image of the CUDA emulator (PTX cannot run here)"}
	}
	path := C.CString(image[len(imagePrefix):])
	defer C.free(unsafe.Pointer(path))
	mu.Lock()
	defer mu.Unlock()
	var h C.uint64_t
	if err := result(C.memfit_emu_module_load(path, &h)); err != nil {
		return Module{}, err
	}
	return Module{uint64(h)}, nil
}

// Link is the driver's compilation of a module image for this GPU (the
// cubin cuLinkComplete makes of PTX): an image of the emulator is already
// the host's code, so it is its own result; anything else is refused, as
// LoadData refuses it.
func Link(image string) (string, error) {
	if len(image) <= len(imagePrefix) || image[:len(imagePrefix)] != imagePrefix {
		return "", &Result{Code: 218, Message: "not an image of the CUDA emulator (PTX cannot be linked here)"}
	}
	return image, nil
}

// DriverVersion is the emulator's stand-in for cuDriverGetVersion.
func DriverVersion() int { return 12060 }

// Function looks up a kernel entry point.
func (m Module) Function(name string) (Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	mu.Lock()
	defer mu.Unlock()
	var h C.uint64_t
	if err := result(C.memfit_emu_function(C.uint64_t(m.h), cname, &h)); err != nil {
		return Function{}, err
	}
	return Function{uint64(h)}, nil
}

// Unload unloads the module.
func (m Module) Unload() error { return result(C.memfit_emu_module_unload(C.uint64_t(m.h))) }

// Launch runs f over grid blocks of block threads; it returns when every
// thread has finished, or with the first bounds violation, deadlock or
// misuse of a warp primitive, naming the kernel, the thread and the
// source line.
func Launch(f Function, grid, block int, _ Stream, words []uint64, starts []int32) error {
	if len(starts) > 64 {
		return fmt.Errorf("%d kernel arguments, at most 64", len(starts))
	}
	if grid <= 0 || block <= 0 {
		return &Result{Code: 1, Message: fmt.Sprintf("launch of %d blocks of %d threads", grid, block)}
	}
	// The parameter array and the words live in C memory: the kernel reads
	// them while the launch runs, as cuLaunchKernel's copy would be read.
	n := len(words)
	cw := (*[1 << 28]uint64)(C.malloc(C.size_t(max(n, 1) * 8)))[:max(n, 1):max(n, 1)]
	copy(cw, words)
	params := (*[64]unsafe.Pointer)(C.malloc(C.size_t(64 * unsafe.Sizeof(uintptr(0)))))
	for i, s := range starts {
		params[i] = unsafe.Pointer(&cw[s])
	}
	defer C.free(unsafe.Pointer(&cw[0]))
	defer C.free(unsafe.Pointer(params))
	mu.Lock()
	defer mu.Unlock()
	return result(C.memfit_emu_launch(C.uint64_t(f.h), C.uint(grid), 1, 1, C.uint(block), 1, 1, (*unsafe.Pointer)(unsafe.Pointer(params))))
}

// Blas is an emulated cuBLAS handle.
type Blas struct{ open bool }

// NewBlas makes a handle.
func NewBlas(Stream) (*Blas, error) { return &Blas{open: true}, nil }

// Close ends the handle.
func (b *Blas) Close() error {
	if b == nil {
		return nil
	}
	b.open = false
	return nil
}

// Gemm computes g by definition (emu.c), checking that every element of
// every operand lies in one live allocation. A bias is added as
// cuBLASLt's epilogue adds it: in the compute type, before C's rounding.
func (b *Blas) Gemm(g Gemm) error {
	if !b.open {
		return BlasStatus(1)
	}
	mu.Lock()
	defer mu.Unlock()
	st := C.memfit_emu_gemm(cbool(g.TransA), cbool(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K),
		C.double(g.Alpha), C.uint64_t(g.A), C.int(g.AType), C.int(g.Lda), C.int64_t(g.StrideA),
		C.uint64_t(g.B), C.int(g.BType), C.int(g.Ldb), C.int64_t(g.StrideB),
		C.double(g.Beta), C.uint64_t(g.C), C.int(g.CType), C.int(g.Ldc), C.int64_t(g.StrideC),
		C.int(g.Batch), C.int(g.Compute), C.uint64_t(g.Bias))
	if st != 0 {
		return fmt.Errorf("%w [CUDA emulator]: %s", BlasStatus(st), C.GoString(C.memfit_emu_message()))
	}
	return nil
}

// HostAlloc returns n bytes of host memory standing in for pinned memory.
func HostAlloc(n int) (unsafe.Pointer, error) {
	if n <= 0 {
		return nil, &Result{Code: 1, Message: "pinned buffer of no bytes"}
	}
	p := C.malloc(C.size_t(n))
	if p == nil {
		return nil, &Result{Code: 2, Message: "out of host memory"}
	}
	return p, nil
}

// HostFree frees what HostAlloc returned.
func HostFree(p unsafe.Pointer) error {
	if p == nil {
		return errors.New("free of no pinned buffer")
	}
	C.free(p)
	return nil
}

// Counting reports whether this build counts launches: the emulator does.
const Counting = true

// CountLaunches turns the counting of launches, GEMMs and copies on or
// off and forgets what was counted. While it is on, every launch records
// the distinct 32-byte sectors its threads read and write (a GPU moves
// global memory in such sectors; what a launch touches twice counts once,
// so the bytes are the traffic it cannot avoid, a lower bound of its DRAM
// traffic), every GEMM the sectors of its operands (C read only with a
// non-zero beta), every copy its bytes.
func CountLaunches(on bool) { C.memfit_emu_count(cbool(on)) }

// LaunchCounts returns what was counted since CountLaunches, kernels
// that were not launched left out.
func LaunchCounts() Counts {
	var c Counts
	var out [5]C.uint64_t
	for i := 0; ; i++ {
		var name *C.char
		if C.memfit_emu_kernel_count(C.int(i), &name, &out[0]) == 0 {
			break
		}
		if out[0] == 0 {
			continue
		}
		// One kernel looked up more than once (or in two modules) is one
		// row.
		k := KernelCount{Name: C.GoString(name), Launches: int64(out[0]), Blocks: int64(out[1]),
			ReadBytes: int64(out[2]), WriteBytes: int64(out[3]), Accesses: int64(out[4])}
		if j := slices.IndexFunc(c.Kernels, func(x KernelCount) bool { return x.Name == k.Name }); j >= 0 {
			x := &c.Kernels[j]
			x.Launches, x.Blocks, x.ReadBytes, x.WriteBytes, x.Accesses = x.Launches+k.Launches, x.Blocks+k.Blocks,
				x.ReadBytes+k.ReadBytes, x.WriteBytes+k.WriteBytes, x.Accesses+k.Accesses
			continue
		}
		c.Kernels = append(c.Kernels, k)
	}
	var types [4]C.int
	for i := 0; C.memfit_emu_gemm_count(C.int(i), &types[0], &out[0]) != 0; i++ {
		c.Gemms = append(c.Gemms, GemmCount{AType: DataType(types[0]), BType: DataType(types[1]), CType: DataType(types[2]),
			Compute: ComputeType(types[3]), Calls: int64(out[0]), FMAs: int64(out[1]), ReadBytes: int64(out[2]), WriteBytes: int64(out[3])})
	}
	for i, kind := range []string{"HtoD", "DtoH", "DtoD", "memset"} {
		var calls, bytes C.uint64_t
		C.memfit_emu_copy_count(C.int(i), &calls, &bytes)
		if calls > 0 {
			c.Copies = append(c.Copies, CopyCount{Kind: kind, Calls: int64(calls), Bytes: int64(bytes)})
		}
	}
	return c
}
