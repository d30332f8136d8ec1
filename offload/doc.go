// Package offload keeps training state in host memory while the model
// trains on another device (ZeRO-Offload's idea, Ren et al. 2021).
//
// Activations moves the activations autograd saves to a host device as
// they are saved and brings them back for backward, a few blocks ahead
// (prefetch), through tensor.SavedHooks: no op and no model knows about
// it, and activation checkpointing composes with it (a checkpointed
// segment saves only its input, which moves like any other activation;
// its recomputation keeps its tensors on the device, since its nested
// backward uses them at once).
//
// Optimizer keeps the optimizer's state and F32 master copies of the
// trainable parameters on the host, computes the update there, and
// copies gradients to the host and parameters back each step.
//
// The host is a device like any other — a CPU device, with an allocator
// of its own — so every byte on either side is counted, under the same
// categories (activation, parameter, gradient, optimizer_state) on the
// host's allocator as on the device's. Tests stand a second CPU device
// in for host memory, and plans a second meta device.
package offload
