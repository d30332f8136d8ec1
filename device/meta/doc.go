// Package meta is a device whose allocator accounts bytes exactly as the
// others do but whose memory holds nothing and whose kernels do nothing.
// One step traced on it gives the exact peak memory of a configuration in
// milliseconds, whatever the model's size: that is how the planner predicts
// and how tests check the memory behaviour of models larger than the
// machine. Values read back from it are zeros.
package meta
