// Package tokenizer turns text into a language model's token ids and
// back. It reads GPT-2's byte-level BPE as OpenAI published it
// (encoder.json or vocab.json, with vocab.bpe or merges.txt) and as
// Hugging Face stores it (a tokenizer.json whose model is BPE over the
// ByteLevel pre-tokenizer). Byte-level BPE round-trips any bytes:
// Decode(Encode(s)) == s, also for text that is not valid UTF-8.
//
// The pre-tokenizer is GPT-2's split pattern written out by hand (Go's
// regexp has no lookahead), with the JavaScript definition of \s that the
// reference encoder the tests compare against uses.
package tokenizer
