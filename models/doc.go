// Package models holds ready-made models built from package nn: an MLP, a
// LeNet-style CNN for 28×28 images, a GPT-style decoder-only transformer
// and the decoder families built like Llama (Decoder: Llama, Mistral,
// Qwen 2 and 3, Gemma 2 and 3, Phi-3, SmolLM 3; families.go).
//
// Each constructor takes a device and a config struct and returns the model
// or an error naming the config field that is wrong (zero sizes, Dim not
// divisible by Heads, a dropout probability outside [0, 1), ...):
//
//	mlp, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{784, 256, 10}, Dropout: 0.1, Seed: 1})
//	cnn, err := models.NewCNN(dev, models.CNNConfig{Conv1: 6, Conv2: 16, Hidden: 120, Classes: 10, Seed: 1})
//	gpt, err := models.NewGPT(dev, models.GPTConfig{Layers: 6, Heads: 6, Dim: 384, Context: 256, Vocab: 256, Dropout: 0.1, Seed: 1})
//	llama, err := models.NewDecoder(dev, models.DecoderConfig{Layers: 6, Heads: 8, KVHeads: 2, Dim: 512, Context: 256, Vocab: 256, Seed: 1})
//	qwen3, err := models.NewDecoder(dev, models.DecoderConfig{Arch: models.Arch{Family: "qwen3", QKNorm: true}, Layers: 6, Heads: 8, KVHeads: 2, Dim: 512, HeadDim: 128, Context: 256, Vocab: 256, Seed: 1})
//
// Parameters are F32 (config DType F64 is for gradient checks on CPU). Each
// one is drawn with a seed derived from the config's Seed and the
// parameter's path (nn.ParamSeed), so one config gives bit-identical
// weights on every run and device.
//
// # Inputs, outputs and errors
//
//   - MLP.Forward takes [B, Widths[0]], or any [B, …] with Widths[0]
//     elements per example (such as [B, 1, 28, 28], which it flattens), and
//     returns [B, Widths[len-1]].
//   - CNN.Forward takes [B, 1, 28, 28] and returns logits [B, Classes].
//   - GPT.Forward takes integer tokens [B, T] (I32 or I64) with T <= Context
//     and returns logits [B, T, Vocab]. GPT.TokenLoss takes the same tokens
//     and targets [B, T] and returns the cross-entropy without ever holding
//     the logits whole (the trainer's default for token tasks; see
//     tensor.LinearCrossEntropy). Decoder.Forward and Decoder.TokenLoss take
//     and return the same.
//   - GPT and Decoder are Packed: ForwardPacked and TokenLossPacked take
//     per-token positions too ([]int32, B·T, restarting at 0 where an
//     example begins; nil is Forward and TokenLoss) for rows that pack
//     several examples end to end, each attending its own example only.
//
// Forward follows the tensor ops' error policy: an input of the wrong shape
// (for GPT, also a sequence longer than Context) panics with *tensor.Error,
// a token outside the vocabulary with *device.IndexError; tensor.Step and
// tensor.Catch, the step boundary, return both as errors. Forward returns a
// tensor the caller owns, never releases or writes into its input, and
// releases every intermediate as soon as it has been consumed; in a NoGrad
// scope it saves nothing, so its peak is that of one layer, not of the
// whole model.
//
// # Blocks
//
// Every model implements nn.Model: Blocks returns its repeated blocks in
// order and SetBlockRunner replaces the nn.RunSequential that Forward runs
// them with (package checkpoint's policies plug in there). For the MLP and
// the CNN the blocks are the layers; for GPT and Decoder, the transformer
// blocks. GPT and Decoder are nn.TokenTiled too: SetTokenRunner makes their
// blocks run the work they do row by row (norms, projections, MLP,
// residual sums) through an nn.TokenRunner, package tile's over tiles of
// the sequence, around attention, to the same values (tokens.go).
//
// # Parameter paths
//
// Paths are stable: checkpoints, freezing patterns and summaries use them.
//
// MLP, with n = len(Widths)-1 linear layers (hidden layer i is
// relu(dropout(linear)), one layer in the sequence):
//
//	layers.N.weight   [Widths[N+1], Widths[N]]   N = 0 … n-1
//	layers.N.bias     [Widths[N+1]]
//
// CNN (N is the index in its seven-layer sequence; pools and flatten have
// no parameters):
//
//	layers.0.weight   [Conv1, 1, 5, 5]           conv, pad 2, ReLU
//	layers.0.bias     [Conv1]
//	                                             layers.1: max pool 2
//	layers.2.weight   [Conv2, Conv1, 5, 5]       conv, ReLU
//	layers.2.bias     [Conv2]
//	                                             layers.3: max pool 2, layers.4: flatten
//	layers.5.weight   [Hidden, Conv2·25]         linear, ReLU (dropout)
//	layers.5.bias     [Hidden]
//	layers.6.weight   [Classes, Hidden]          linear
//	layers.6.bias     [Classes]
//
// GPT (N = 0 … Layers-1, D = Dim):
//
//	embed.tokens.weight       [Vocab, D]     also the output head (tied)
//	embed.positions.weight    [Context, D]
//	blocks.N.ln1.weight       [D]            blocks.N.ln1.bias [D]
//	blocks.N.attn.qkv.weight  [3·D, D]       blocks.N.attn.qkv.bias [3·D]
//	blocks.N.attn.proj.weight [D, D]         blocks.N.attn.proj.bias [D]
//	blocks.N.ln2.weight       [D]            blocks.N.ln2.bias [D]
//	blocks.N.mlp.fc.weight    [4·D, D]       blocks.N.mlp.fc.bias [4·D]
//	blocks.N.mlp.proj.weight  [D, 4·D]       blocks.N.mlp.proj.bias [D]
//	final_norm.weight         [D]            final_norm.bias [D]
//
// Decoder (N = 0 … Layers-1, D = Dim, H = Heads·HeadDim, K =
// KVHeads·HeadDim, F = Hidden; Hugging Face's names in hf.LoadDecoder);
// the parts in brackets only where the family's Arch has them:
//
//	embed.tokens.weight          [Vocab, D]     also the head when TiedHead
//	blocks.N.attn_norm.weight    [D]            RMSNorm gain
//	blocks.N.attn.q.weight       [H, D]         [.bias [H]: QKVBias]
//	blocks.N.attn.k.weight       [K, D]         [.bias [K]]
//	blocks.N.attn.v.weight       [K, D]         [.bias [K]]
//	[blocks.N.attn.qkv.weight    [H+2K, D]]     FusedQKV, for q, k and v
//	[blocks.N.attn.q_norm.weight [HeadDim]]     QKNorm
//	[blocks.N.attn.k_norm.weight [HeadDim]]
//	blocks.N.attn.o.weight       [D, H]
//	[blocks.N.post_attn_norm.weight [D]]        SandwichNorms
//	blocks.N.mlp_norm.weight     [D]
//	blocks.N.mlp.gate.weight     [F, D]
//	blocks.N.mlp.up.weight       [F, D]
//	[blocks.N.mlp.gate_up.weight [2F, D]]       FusedGateUp, for gate and up
//	blocks.N.mlp.down.weight     [D, F]
//	[blocks.N.post_mlp_norm.weight [D]]         SandwichNorms
//	final_norm.weight            [D]
//	head.weight                  [Vocab, D]     absent when TiedHead
//
// GPT and Decoder generate (Generate, with a KVCache under memory.KVCache;
// a Decoder's holds its KVHeads key/value heads, rotated, not Heads) and
// implement Generator.
//
// # Memory
//
// With Run.InPlace (nn.NewRun turns it on) the models write into tensors
// they made and nobody saved instead of allocating new ones: the MLP's and
// CNN's dropout and ReLU write into their layer's output (the MLP applies
// dropout before ReLU, which gives the same values and keeps one activation
// per hidden layer instead of two), GPT's residual sums and dropouts write
// into the branch outputs. The tensor
// package's version counters turn any mistake here into an error in
// backward, never a wrong gradient.
package models
