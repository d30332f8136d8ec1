// Package tokenizer turns text into the token ids a language model was
// trained on, and back: byte-level BPE (GPT-2, Llama 3, Qwen 2.5 and 3,
// Mistral Nemo, SmolLM2/3, Phi-4 and their kin) and SentencePiece-style
// BPE with byte fallback (Llama 2, Mistral 7B, Phi-3, Gemma 2 and 3), read
// from a Hugging Face tokenizer.json or from GPT-2's encoder.json and
// vocab.bpe by Open.
//
// # Encoding
//
// The pipeline is the Rust tokenizers library's. Added tokens
// (<|endoftext|>, <start_of_turn>, ...) are found first, leftmost and
// longest, with their lstrip, rstrip, single_word and normalized flags:
// those not normalized in the raw text, the others in each stretch between
// them once normalized (NFC, NFD, NFKC, NFKD, Replace, Prepend). The
// stretches between added tokens are pre-tokenized (GPT-2's, Llama 3's,
// Qwen 2's, Tekken's and o200k's split patterns, Digits, Metaspace,
// string splits, in Sequences) and each pre-token is merged with the
// vocabulary's ranked merges (the lowest rank first, the leftmost of
// equals), its result cached. The split patterns need a lookahead that
// Go's regexp lacks, so they are scanned by hand, exactly as a
// backtracking engine matches them; other Split patterns go through Go's
// regexp when it accepts them. A tokenizer.json component outside what
// these models use (Lowercase, WordPiece, Unigram, ...) is an error naming
// it rather than an encoding that might differ.
//
// Encode adds no beginning- or end-of-text token; BOS and EOS give them.
// EncodeReader encodes a stream in pieces with the same result and memory
// bounded by the longest pre-token.
//
// # Loading
//
// Tokenizer files are treated as hostile: only regular files are read
// (a FIFO or device is refused without blocking), each up to a size far
// above real ones, and every token id, vocabulary entry, merge and added
// token is checked as it is read, the first bad one reported with its file
// and place. The bounds and their reasons are in file.go.
//
// # Round trip
//
// Decode(Encode(s)) == s for every string, valid UTF-8 or not, with a
// byte-level vocabulary without a normalizer (with one, as Qwen's NFC,
// it gives s normalized). With a SentencePiece-style one (byte fallback on)
// it holds for text without added tokens and without U+2581 ("▁"): the
// normalizer writes spaces as "▁" and puts one before the text, and the
// decoder turns every "▁" back into a space and drops the first; text
// after an added token gets its own "▁", which decodes as a space (the
// reference tokenizers do the same). Byte tokens decode to their bytes as
// they are, where Hugging Face would put U+FFFD for invalid UTF-8.
package tokenizer
