package cuda

// Option configures a CUDA device.
type Option func(*config)

type config struct {
	limit     int64 // bytes the caching allocator may take (0: the GPU's total memory)
	allowTF32 bool
}

// MemLimit caps the memory the device's allocator may take from the GPU at
// n bytes (0: no cap beyond the GPU's own size), so that out-of-memory
// behaviour and memory budgets can be tested on a large GPU.
func MemLimit(n int64) Option { return func(c *config) { c.limit = n } }

// AllowTF32 lets f32 GEMMs round their inputs to TF32 on tensor cores
// (faster on Ampere and later, about 1e-3 relative error). Off by default,
// so f32 results stay within f32 tolerance of the CPU device.
func AllowTF32(on bool) Option { return func(c *config) { c.allowTF32 = on } }

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c
}
