// Package tensor owns tensors, their lifetime and automatic differentiation.
//
// A Tensor is a handle on a strided view of reference-counted device
// storage. Whoever receives a tensor owns that handle and drops it with
// Release; views and tensors saved for backward hold references of their
// own, so memory returns to the device's cache exactly when nothing can use
// it any more. The garbage collector is never relied on to free device
// memory.
//
// Ops are methods of a Scope. The scope carries the modes that PyTorch keeps
// in thread-local state — whether to record the graph (NoGrad), autocast —
// so they can never leak across goroutines, and it owns the tensors its ops
// return until Close, which keeps custom loops short:
//
//	err := tensor.Step(func(s *tensor.Scope) error {
//		loss := s.CrossEntropy(s.Linear(x, w, b), y, tensor.CrossEntropyOptions{})
//		loss.Backward()
//		return nil
//	})
//
// Backward releases each node's saved tensors as soon as the node has run.
// In a NoGrad scope nothing is saved, so a forward pass needs memory for the
// largest layer rather than for the whole network.
//
// Saved-tensor hooks: every tensor a recording op saves passes through the
// Pack of the scope's SavedHooks (SaveHooks), which may keep it in a form
// of its own — package offload copies activations to host memory — and
// backward calls Unpack just before the node that saved it runs. Version
// checks still apply to packed tensors. CopyStorage, Alias and StorageKey
// are what such hooks move storages between devices with (AllocStorage
// and CopyStorageFrom when the allocation and the copy happen apart).
//
// Debugging memory: TrackLeaks records where each live tensor was made
// (LeakReport lists them with file:line); a GrowthDetector watches
// allocated bytes at step boundaries and names the creation sites of what
// survives when they keep growing; EnableAllocSites stamps the allocator's
// event history with the same sites for memory timelines (memory/report).
//
// Errors: ops panic with *Error (shapes, lifetimes, autograd misuse),
// *memory.OOMError or *device.IndexError; Step and Catch recover exactly
// these and return them, which is what makes out-of-memory recoverable at
// the step boundary. Anything that reads user input returns errors.
package tensor
