package tokenizer

import (
	"errors"
	"os"

	"github.com/memfit/memfit/internal/regularfile"
)

// Bounds on what a tokenizer is read from. Each is far above what real
// tokenizers need and exists so that a hostile file is refused with a
// message instead of being read into memory.
const (
	// maxTokenID bounds token ids. The largest published vocabularies hold
	// about 2^18 tokens (Gemma 3: 262,144; BLOOM: 250,880; XLM-V's
	// Unigram, which memfit does not read: 901,629); 2^20 leaves four
	// times Gemma 3's. The decode table and a model's embedding
	// (VocabSize rows) are sized by the largest id, so one hostile id must
	// not choose them, and a vocabulary of that many entries still loads
	// in a few hundred MB and seconds.
	maxTokenID = 1<<20 - 1

	// maxAddedTokens bounds tokenizer.json's added_tokens: Gemma 3 lists
	// about six thousand, speech models built on Llama (Llasa) 65,536
	// speech tokens.
	maxAddedTokens = 1 << 18

	// maxAddedBytes bounds the text of all added tokens together (and
	// again once normalized): Gemma 3's take about 100 KB, Llasa's
	// 65,536 about 1.3 MB. Their index (added.go) takes about 16 bytes a
	// byte of text, so 8 MiB keeps it under 150 MB, where the file alone
	// could make it gigabytes.
	maxAddedBytes = 8 << 20

	// maxTokenizerJSON bounds a tokenizer.json: Llama 3's is 9 MB, Gemma
	// 3's (the largest vocabulary above) about 33 MB. Parsing holds the
	// file, the vocabulary and the merge table at once, a few times the
	// file's size, so 128 MiB keeps about 4 times Gemma 3's while a
	// hostile file stays well under 1 GiB.
	maxTokenizerJSON = 128 << 20

	// maxVocabJSON and maxMergesTxt bound GPT-2's encoder.json (1 MB) and
	// vocab.bpe (456 KB), with the same room for larger vocabularies in
	// that format.
	maxVocabJSON = 64 << 20
	maxMergesTxt = 64 << 20

	// maxConfigJSON bounds tokenizer_config.json and chat_template.jinja:
	// Llama 3's config is 50 KB, Gemma 3's, which lists six thousand added
	// tokens, about 1.2 MB.
	maxConfigJSON = 16 << 20
)

// readRegular reads path, which must be a regular file of at most limit
// bytes (regularfile.Read: a FIFO or a device named as a tokenizer file is
// refused rather than waited on); errors name the path once.
func readRegular(path string, limit int64) ([]byte, error) {
	b, err := regularfile.Read(path, limit)
	if err != nil {
		return nil, &Error{Path: path, Err: unwrapPath(err)}
	}
	return b, nil
}

// readOptional is readRegular for a file that may be absent: nil, nil
// then.
func readOptional(path string, limit int64) ([]byte, error) {
	b, err := readRegular(path, limit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
