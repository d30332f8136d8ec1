//go:build cudaemu

package cuda

// Emulated reports whether this build runs CUDA on the CPU emulator (the
// build tag cudaemu) instead of a GPU; tests use it to keep their shapes
// small.
const Emulated = true
