// Package train owns the training loop: it builds data, model, optimizer
// and the memory techniques from a Config, runs steps with progress,
// evaluation in inference mode, metrics (CSV or JSON Lines) and hooks,
// saves and resumes (one safetensors file per checkpoint: the weights
// named by parameter path, the optimizer's tensors and the rest of the
// state beside them in the same file, checksummed and written
// atomically), recovers from
// running out of memory by cutting the batch into more micro-batches, and
// plans: Plan predicts the peak memory of a configuration by tracing real
// steps on the meta device, and Fit chooses the cheapest techniques that
// fit a budget.
//
// The Trainer is a convenience over the library API (tensor, nn, models,
// optim, amp, checkpoint, accumulate, freeze, data), which stays usable on
// its own for custom loops.
package train
