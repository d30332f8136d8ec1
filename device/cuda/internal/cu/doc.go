// Package cu is the CUDA driver API as device/cuda uses it: the types and
// calls of gorgonia.org/cu it needs, plus the launch, cuBLAS and pinned
// memory calls gorgonia lacks.
//
// With the build tag cuda they are gorgonia.org/cu itself (type aliases and
// function values) and cgo against libcuda, libcublas and libcublasLt. With
// the build tag cudaemu they are served by a CPU emulator of CUDA's
// execution model
// (emu.c, kernel.h): device memory is host memory with guard pages and a
// registry of live allocations, streams and events complete synchronously,
// kernels.cu is compiled for the host by g++ where NVRTC would compile it,
// and each CUDA thread of a block runs as a fiber that really interleaves
// with the others at barriers and warp shuffles. device/cuda's own Go code
// (launch geometry, argument packing, the caching allocator over device
// memory, staging through pinned buffers) is the same in both builds; only
// this package differs. See CONTRIBUTING.md for how to run the emulator.
package cu
