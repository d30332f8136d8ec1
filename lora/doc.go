// Package lora owns low-rank adaptation as a training technique: it
// chooses the Linear layers of a model to adapt by path pattern, attaches
// an adapter (nn.LoRA) to each, and freezes every other parameter, so that
// only the adapters have gradients and optimizer state; Merge and Unmerge
// fold the adapters into their weights and back.
//
// Fine-tuning a pretrained model that barely fits is where memory runs
// out most often. With adapters, the memory of training is the frozen
// base (which train holds in 16 bits under -amp), the activations, and
// for the adapters alone gradients and optimizer state: on a
// GPT-2-small-shaped model, rank 8 on every Linear layer trains 0.9% of
// the parameters.
//
// Targets are globs over the layers' paths (a Linear layer's path is its
// weight's name without ".weight": "blocks.3.attn.qkv", "blocks.3.mlp.fc"),
// in the syntax of package freeze; no targets adapt every Linear layer.
package lora
