// Package device defines the contract between tensors and the hardware that
// stores and computes them: element types, buffers handed out by a device's
// caching allocator, strided views of them, and the kernel set every device
// implements.
//
// Implementations live in sub-packages: device/cpu (pure Go, the default),
// device/meta (accounts bytes exactly but stores and computes nothing, for
// planning) and device/cuda (built only with the cuda tag).
package device
