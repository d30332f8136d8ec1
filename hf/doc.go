// Package hf reads and writes models in Hugging Face's checkpoint layout:
// config.json beside model.safetensors (or shards listed in
// model.safetensors.index.json), tensors in F32, F16 or BF16, read through
// a memory map so that an import holds the model's parameters and one
// tensor, never a second copy of the model.
//
// The GPT-2 family maps onto models.GPT (LoadGPT2, SaveGPT2): names with or
// without the "transformer." prefix, Conv1D weights stored (in, out) and
// transposed into memfit's (out, in) Linear weights, the head tied to the
// token embedding, the attn.bias and attn.masked_bias buffers skipped.
// Every malformed file (a bad header, a missing tensor, a shape that
// contradicts config.json, an unknown architecture) is an error naming
// the file and the tensor.
package hf
