// Package checkpoint trades compute for memory: it runs parts of a forward
// pass without keeping their activations and recomputes them when backward
// needs them (activation checkpointing, Chen et al. 2016).
//
// Run checkpoints one function; Sequential and Policy.Runner cut a model's
// blocks into segments by policy (Off, Every, Sqrt, Segments(k),
// Budget(bytes), or Nested(k): segments whose recompute checkpoints each
// block again, two levels). Recomputation repeats the forward exactly — same
// autocast dtype, same dropout seeds — so gradients are bitwise equal to the
// run without checkpointing.
package checkpoint
