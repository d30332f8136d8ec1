// Package nn owns the building blocks of models: the Module contract, the
// Run that carries a forward pass's modes, parameters addressed by dotted
// paths, seeded initialisers, layers and losses.
//
// # Modules and ownership
//
// A Module's Forward returns a tensor its caller owns, releases every
// temporary it makes as soon as it has been consumed, and neither releases
// nor writes into its input (the caller may still need it, an op may have
// saved it, and activation checkpointing recomputes a block from it). In a
// Run whose Scope does not record (tensor.NoGrad, nn.Eval) layers save
// nothing, so a deep model's forward needs memory for one layer at a time.
//
// # Parameters
//
// Parameters are leaf tensors of category memory.Parameter whose Name is
// their path in the model ("blocks.3.attn.qkv.weight") and which require
// grad; their gradient buffers appear at the first backward (category
// memory.Gradient). A Builder makes them: each is drawn from its Init
// (Normal, Uniform, KaimingNormal/Uniform, XavierNormal/Uniform,
// GPTResidual, constants) with the seed ParamSeed(model seed, path), so one
// configuration gives bit-identical weights whatever the order of
// construction. Builder.DType F64 makes F64 parameters for gradient checks.
//
// # Layers
//
// Linear, Conv2d, MaxPool2d, AvgPool2d, Flatten, LayerNorm, Embedding,
// CausalSelfAttention, the pointwise layers ReLU, GELU, Tanh and Dropout,
// Sequential and Fused; losses CrossEntropy and MSE. The decoder
// families' layers: RMSNorm (Gemma's with a gain offset), Rotary (rotary
// position embeddings in Hugging Face's rotate_half layout, partial, with
// llama3, linear and longrope frequency scaling), GatedMLP (SwiGLU or
// GeGLU, gate and up fused or not) and GroupedQueryAttention (head
// norms, biases, a fused qkv, a score scale, soft cap and sliding
// window); they are composed of tensor ops, so their
// gradients are the ops' (each is checked against finite differences). Dropout masks are a
// function of Run.Seed and the layer's path, regenerated in backward rather
// than stored, and identical when checkpointing recomputes a block.
//
// # Token-wise pieces
//
// A block whose work between attentions is row by row can run it through
// a TokenRunner (tokens.go): Tokens describes a piece (a TokenFunc of
// rows, its inputs, parameters and output widths), and the attention
// layers have the halves such pieces meet at as methods
// (GroupedQueryAttention.ProjectRows and AttendRows,
// CausalSelfAttention.AttendRows). Package tile's runner runs pieces over
// tiles of the sequence; models implement TokenTiled.
//
// # In-place ops
//
// With Run.InPlace (on in NewRun and Eval) layers write into tensors they
// made themselves and that no op saved, instead of allocating new ones:
// a Fused layer's pointwise tail (ReLU, dropout, GELU in inference) writes
// into its Linear or Conv2d output, Residual sums into the branch output,
// Dropout.Overwrite and attention's query scaling write in place. Results
// are bit for bit those of the out-of-place run. A write into a tensor that
// an op did save — a misuse — makes backward fail with a *tensor.Error
// naming the op that saved it (the tensor package's version counters),
// never a wrong gradient.
package nn
