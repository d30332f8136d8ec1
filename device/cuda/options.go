package cuda

import "os"

// Option configures a CUDA device.
type Option func(*config)

type config struct {
	limit        int64 // bytes the caching allocator may take (0: the GPU's total memory)
	allowTF32    bool
	biasEpilogue bool
}

// MemLimit caps the memory the device's allocator may take from the GPU at
// n bytes (0: no cap beyond the GPU's own size), so that out-of-memory
// behaviour and memory budgets can be tested on a large GPU.
func MemLimit(n int64) Option { return func(c *config) { c.limit = n } }

// AllowTF32 lets f32 GEMMs round their inputs to TF32 on tensor cores
// (faster on Ampere and later, about 1e-3 relative error). Off by default,
// so f32 results stay within f32 tolerance of the CPU device.
func AllowTF32(on bool) Option { return func(c *config) { c.allowTF32 = on } }

// BiasEpilogue lets products with a bias of C's dtype add it in
// cuBLASLt's epilogue (on by default): no pass writing the bias into C
// first, C not read, one rounding instead of two for a 16-bit C. Off, or
// where cuBLASLt has no algorithm, the bias is written into C first
// (device.BiasFirst). The environment variable MEMFIT_CUDA_BIAS_EPILOGUE=0
// turns it off for every device of a process, for a run on a GPU where
// it misbehaves.
func BiasEpilogue(on bool) Option { return func(c *config) { c.biasEpilogue = on } }

func newConfig(opts []Option) config {
	c := config{biasEpilogue: os.Getenv("MEMFIT_CUDA_BIAS_EPILOGUE") != "0"}
	for _, o := range opts {
		o(&c)
	}
	return c
}
