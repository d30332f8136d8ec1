// Package accumulate owns gradient accumulation: a batch is processed as N
// micro-batches whose gradients add up to the gradient of the whole batch,
// so that activation memory is that of one micro-batch while the optimizer
// sees the full batch.
//
// Each micro-batch loss is weighted so that the accumulated gradient equals
// the full-batch mean gradient exactly: by its share of the examples (an
// uneven last micro-batch counts for what it holds), or, for token losses
// with an ignore index, by its share of the counted tokens of the whole
// window. The optimizer (and a GradScaler's Unscale/Step/Update) runs once
// per window, after the last micro-batch.
package accumulate
