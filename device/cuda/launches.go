package cuda

import (
	"time"

	"github.com/memfit/memfit/device"
)

// LaunchCounts is what the CUDA emulator counted of the work since
// [Device.ResetLaunchCounts]: every kernel launch, cuBLAS GEMM and copy.
// A kernel's bytes are the distinct 32-byte sectors of device memory its
// launch read and wrote (a GPU moves global memory in such sectors), summed
// over its launches: what one launch touches twice counts once, as if
// every cache held it, so they are the traffic the launch cannot avoid, a
// lower bound of its DRAM traffic. A GEMM's are the sectors of its
// operands (C read only when beta is not 0). On a GPU nothing is counted
// ([Device.CountsLaunches] is false).
type LaunchCounts struct {
	Kernels []KernelCount
	Gemms   []GemmCount
	Copies  []CopyCount
}

// KernelCount is one kernel's launches.
type KernelCount struct {
	Name                  string // the entry point, as k_softmax_f32
	Launches, Blocks      int64
	ReadBytes, WriteBytes int64
	Accesses              int64 // global-memory loads and stores, each one counted
}

// GemmCount is the GEMMs of one combination of types.
type GemmCount struct {
	A, B, C               device.DType
	Compute               string // cuBLAS's compute type: "32F", "32F_FAST_TF32" or "64F"
	Calls, FMAs           int64  // calls, multiply-adds
	ReadBytes, WriteBytes int64
}

// CopyCount is the copies of one kind: "HtoD", "DtoH", "DtoD" or "memset".
type CopyCount struct {
	Kind         string
	Calls, Bytes int64
}

// A Profile is the GPU's time between [Device.StartProfile] and
// [Device.Profile], from timing events around each operation: on a GPU,
// the GPU's own clock; on the emulator, the host's time of the emulated
// work (each call completes before it returns).
type Profile struct {
	// Ops is the time of each kernel, product and copy, summed over its
	// calls, longest first. A kernel is named by its entry point (as
	// k_softmax_f32); a cuBLAS product "gemm A·B→C m×n×k" in memfit's
	// row-major terms, with "×batch" for a batch; a copy "HtoD", "DtoH",
	// "DtoD" or "memset".
	Ops []*OpTime
	// Span is the time from StartProfile to the end of the last operation
	// on the compute stream, Busy the part of it when the compute stream
	// ran an operation: Span − Busy is the GPU waiting for the host
	// (launches not yet made, the host blocked in a copy or a
	// synchronization).
	Span, Busy time.Duration
	// HostWaits is the host's time blocked on the GPU, by call, longest
	// first.
	HostWaits []HostWait
	// Truncated is true when more operations ran than a profile keeps
	// (2^18): the later ones are not counted.
	Truncated bool
}

// OpTime is one operation's calls and GPU time.
type OpTime struct {
	Name       string
	CopyStream bool // queued on the copy stream (beside the compute stream's work)
	Calls      int64
	Time       time.Duration
}

// HostWait is the host's time blocked in one kind of driver call.
type HostWait struct {
	Name  string // as "cuMemcpyDtoH" or "cuEventSynchronize (Write's staging)"
	Calls int64
	Time  time.Duration
}

// A ModuleLoad says how the device's kernels were loaded: where the image
// came from and how long each part took. [Device.ModuleLoad] returns it.
type ModuleLoad struct {
	// Cached is true when the GPU's own code came from the disk cache:
	// neither NVRTC nor the driver's JIT compiled anything.
	Cached bool
	// Compile is NVRTC's time (0 when the PTX was cached), Link the
	// driver's JIT from PTX to the GPU's code (0 when that was cached),
	// Load cuModuleLoadData's and the entry points' lookup.
	Compile, Link, Load time.Duration
}
