package train

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/tokenizer"
)

// tokenizedShard returns an llm.c token shard of the text file path under
// tok, tokenizing it the first time: shards are cached by the text's and
// the vocabulary's hashes under the user's cache directory
// (memfit/shards), written through a temporary file and a rename. The text
// is read whole (its size in memory, once); training then reads the shard.
func tokenizedShard(path string, tok *tokenizer.BPE) (string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(text)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "memfit", "shards")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, hex.EncodeToString(sum[:8])+"-"+tok.Fingerprint()+".bin")
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() {
		return out, nil
	}
	ids := tok.Encode(string(text))
	toks := make([]int32, len(ids))
	for i, id := range ids {
		toks[i] = int32(id)
	}
	f, err := os.CreateTemp(dir, ".shard-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = data.WriteShard(f, toks)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("caching the tokens: %v", err)
	}
	return out, nil
}

// tokenizerCodec is a Codec through a tokenizer.
type tokenizerCodec struct{ t *tokenizer.BPE }

func (c tokenizerCodec) Encode(s string) ([]int, error) { return c.t.Encode(s), nil }

func (c tokenizerCodec) Decode(ids []int) string {
	s, err := c.t.Decode(ids)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return s
}
