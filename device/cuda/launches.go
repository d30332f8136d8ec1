package cuda

import "github.com/memfit/memfit/device"

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
