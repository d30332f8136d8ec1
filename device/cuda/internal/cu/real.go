//go:build cuda && !cudaemu

package cu

import (
	"gorgonia.org/cu"

	_ "github.com/memfit/memfit/device/cuda/internal/probe" // must initialise before gorgonia.org/cu
)

// The driver API is gorgonia.org/cu's, aliased so that device/cuda names
// one package in both builds.
type (
	DevicePtr   = cu.DevicePtr
	Device      = cu.Device
	CUContext   = cu.CUContext
	Stream      = cu.Stream
	Event       = cu.Event
	Module      = cu.Module
	Function    = cu.Function
	StreamFlags = cu.StreamFlags
	EventFlags  = cu.EventFlags
)

const (
	DefaultStream = cu.DefaultStream
	DefaultEvent  = cu.DefaultEvent
	DisableTiming = cu.DisableTiming
)

var (
	NumDevices        = cu.NumDevices
	SetCurrentContext = cu.SetCurrentContext
	MemInfo           = cu.MemInfo
	MemAlloc          = cu.MemAlloc
	MemFree           = cu.MemFree
	MemcpyHtoD        = cu.MemcpyHtoD
	MemcpyDtoH        = cu.MemcpyDtoH
	MemcpyHtoDAsync   = cu.MemcpyHtoDAsync
	MemsetD32Async    = cu.MemsetD32Async
	MakeStream        = cu.MakeStream
	MakeEvent         = cu.MakeEvent
	DestroyEvent      = cu.DestroyEvent
	LoadData          = cu.LoadData
)

// DriverVersion is cuDriverGetVersion's (12060 for 12.6; -1 when the
// driver does not say).
func DriverVersion() int { return cu.Version() }

// Link compiles a module image (PTX) for the current context's GPU with
// the driver's JIT, as cuModuleLoadData would, and returns the result, a
// cubin that loads without compiling: the image device/cuda keeps on disk
// so that a new process skips the JIT's seconds.
func Link(image string) (cubin string, err error) {
	link, err := cu.NewLink()
	if err != nil {
		return "", err
	}
	defer func() {
		if derr := link.Destroy(); err == nil && derr != nil {
			cubin, err = "", derr
		}
	}()
	// The driver reads PTX up to its NUL (cuLinkAddData's contract).
	if err := link.AddData(cu.JITInputPTX, image+"\x00", "kernels.ptx"); err != nil {
		return "", err
	}
	return link.Complete()
}

// Track and Untrack tell the emulator's bounds checks which extents of
// device memory are live allocations; with a real driver they do nothing.
func Track(p DevicePtr, n int64) error { return nil }

// Untrack ends what Track began.
func Untrack(p DevicePtr) {}

// Counting reports whether this build counts launches: only the emulator
// does.
const Counting = false

// CountLaunches does nothing on a GPU.
func CountLaunches(on bool) {}

// LaunchCounts is empty on a GPU.
func LaunchCounts() Counts { return Counts{} }
