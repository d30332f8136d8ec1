// Package tokenizer turns text into the token ids a language model was
// trained on, and back: byte-level BPE (GPT-2, Llama 3 and their kin) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral), read from
// a Hugging Face tokenizer.json or from GPT-2's encoder.json and vocab.bpe
// by Open.
//
// # Encoding
//
// Added tokens (<|endoftext|>, </s>, ...) are found in the text first,
// leftmost and longest, as Hugging Face's tokenizers do; the stretches of
// text between them are pre-tokenized and each pre-token is merged with
// the vocabulary's ranked merges (the lowest rank first, the leftmost of
// equals), its result cached. GPT-2's and Llama 3's split patterns need a
// lookahead that Go's regexp lacks, so they are scanned by hand, exactly
// as a backtracking engine matches them; other Split patterns go through
// Go's regexp when it accepts them. A tokenizer.json component outside
// what these models use (other normalizers, WordPiece, Unigram, ...) is an
// error naming it rather than an encoding that might differ.
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
// byte-level vocabulary. With a SentencePiece-style one (byte fallback on)
// it holds for text without added tokens and without U+2581 ("▁"): the
// normalizer writes spaces as "▁" and puts one before the text, and the
// decoder turns every "▁" back into a space and drops the first; text
// after an added token gets its own "▁", which decodes as a space (the
// reference tokenizers do the same). Byte tokens decode to their bytes as
// they are, where Hugging Face would put U+FFFD for invalid UTF-8.
package tokenizer
