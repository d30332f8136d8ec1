// Package hf reads and writes models in Hugging Face's checkpoint layout:
// config.json beside model.safetensors (or shards listed in
// model.safetensors.index.json), tensors in F32, F16 or BF16, read through
// a memory map so that an import holds the model's parameters and one
// tensor, never a second copy of the model. With Options.Defer it holds
// not even the parameters: they are checked against the checkpoint at
// once and read from the mapped files only when a sharding places them
// (parallel's ZeRO-3, one block at a time), the files staying mapped until
// then.
//
// The GPT-2 family maps onto models.GPT (LoadGPT2, SaveGPT2): names with or
// without the "transformer." prefix, Conv1D weights stored (in, out) and
// transposed into memfit's (out, in) Linear weights, the head tied to the
// token embedding, the attn.bias and attn.masked_bias buffers skipped.
// The decoder families (Llama, Mistral, Qwen 2 and 3, Gemma 2 and 3,
// Phi-3, SmolLM 3; family.go) map onto models.Decoder (LoadDecoder,
// SaveDecoder): names model.embed_tokens, model.layers.N.self_attn.
// {q,k,v,o}_proj (Phi-3's qkv_proj), q_norm and k_norm,
// model.layers.N.mlp.{gate,up,down}_proj (Phi-3's gate_up_proj),
// input_layernorm, post_attention_layernorm (Gemma's
// pre/post_feedforward_layernorm too), model.norm and lm_head (absent when
// tie_word_embeddings); q_proj and k_proj are used as stored, since
// memfit's rotary embeddings pair a head's halves as Hugging Face's
// rotate_half does. Each family reads its config.json with its
// transformers config class's defaults and refuses, naming it, any key
// that changes the math in a way memfit does not compute. Architecture
// tells the families apart (config.json's model_type or architectures,
// else the tensor names); Load and Save pick the family's functions. A
// directory of config.json alone gives a model's shape, which a plan
// builds on the meta device before the weights are downloaded. An export
// is a model directory: config.json, weights sharded past 5 GB, the
// tokenizer's files, generation_config.json, and LoRA adapters in PEFT's
// layout on request, which LoadPEFT attaches again to their base.
//
// Files are read through package safetensors, which checks every header
// and index before anything is allocated and opens only regular files (a
// FIFO never blocks a load); a directory's model.safetensors wins over an
// index, as in transformers. config.json's values are bounded (MaxLayers
// and the others), so GPT2Config.Params and DecoderConfig.Params size a
// model from the config alone; and the model a config describes is bound
// to the checkpoint's tensors on the meta device before it is built, so a
// config that does not describe its checkpoint never allocates the model
// it claims. Save replaces a directory's model as a whole, removing an
// older sharded checkpoint once the new model.safetensors is in place.
//
// Options.Quantize stores chosen Linear weights in NF4 or Int8 as they
// are read, one tensor at a time, so that an import holds the quantized
// model plus one tensor, never the model in a float dtype; a checkpoint
// in bitsandbytes' 4-bit layout (transformers' save of a load_in_4bit
// model) loads into NF4 from its codes as stored, or into a float weight
// dequantized. Save writes a model holding quantized weights in BF16
// (SaveWith chooses), each weight dequantized and its adapter merged as
// the writer reaches it.
//
// Every malformed file (a bad header, a missing tensor, a tensor memfit
// would drop, a shape that contradicts config.json, a value out of
// bounds, an unknown architecture) is an error naming the file and the
// tensor or key.
package hf
