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
