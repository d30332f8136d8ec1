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
// Optimizer keeps the optimizer's state and master copies of the
// trainable parameters (in their dtype) on the host, computes the update
// there, and copies gradients to the host and parameters back each step.
// Step does it after backward. Arm and Finish overlap the update with
// backward: each gradient is copied to the host as soon as backward
// completes it (tensor.OnGradReady), its device buffer freed, and its
// master updated by one goroutine of the host's while backward goes on;
// Finish waits for it and writes the parameters back. The first armed
// step counts when each gradient completes (a parameter used inside and
// outside a checkpointed segment completes twice) and updates after
// backward; later steps overlap, bit for bit as Step. What needs every
// gradient before any update — clipping by the global norm, a loss
// scaler's inf/nan check — steps with Step, and with accumulation only
// the last micro-batch's backward is armed; an optimizer whose updates
// allocate (Adafactor) steps with Step too, since every allocation and
// free must happen on the caller's goroutine at points fixed by
// backward's order, for plans on meta devices to equal measured runs.
// Arm reserves every host gradient at once (so that running out of host
// memory fails before anything changes): with activations offloaded too,
// the host's peak holds the gradients and the saved activations together.
//
// Copies are synchronous on every device: the CPU device's are memcpy,
// the CUDA device's Read and Write stage through pinned buffers on the
// calling goroutine. What overlaps backward is the host's arithmetic.
//
// The host is a device like any other — a CPU device, with an allocator
// of its own — so every byte on either side is counted, under the same
// categories (activation, parameter, gradient, optimizer_state) on the
// host's allocator as on the device's. Tests stand a second CPU device
// in for host memory, and plans a second meta device.
package offload
