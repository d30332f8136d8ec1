package data

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/regularfile"
)

// TextEncoder is what TokenizeCorpus needs of a tokenizer;
// *tokenizer.BPE satisfies it.
type TextEncoder interface {
	// EncodeReader hands the tokens of r's text to fn in pieces, in
	// bounded memory.
	EncodeReader(r io.Reader, fn func(ids []int) error) error
	// VocabSize is one more than the largest token id.
	VocabSize() int
	// Fingerprint identifies the vocabulary and encoding rules.
	Fingerprint() string
}

// textShardVersion changes whenever the shards TokenizeCorpus writes for
// the same text and tokenizer would change.
const textShardVersion = "memfit text shard 1\n"

// TokenizeCorpus encodes the text files at paths with enc, one after the
// other, into an llm.c token shard (uint16 tokens when the vocabulary
// fits, else uint32) and opens it as windows whose Vocab is enc's. The
// shard is written once into the cache directory (CacheDir, else
// $MEMFIT_CACHE, else the user cache directory), named by the SHA-256 of
// the files' content and enc's Fingerprint, atomically and with a sidecar
// as for decompressed files; a later run with the same text and tokenizer
// opens it without encoding. Encoding streams: memory does not grow with
// the text.
func TokenizeCorpus(paths []string, enc TextEncoder, opt WindowOptions, opts ...Option) (*TokenDataset, error) {
	name := ""
	if len(paths) > 0 {
		name = paths[0]
	}
	if len(paths) == 0 {
		return nil, fileErr("text", "", "no files")
	}
	vocab := enc.VocabSize()
	if vocab < 1 || vocab > math.MaxInt32 {
		return nil, fileErr("text", name, "tokenizer vocabulary of %d tokens", vocab)
	}
	h := sha256.New()
	io.WriteString(h, textShardVersion+enc.Fingerprint()+"\n")
	for _, p := range paths {
		if err := hashFile(h, p); err != nil {
			return nil, err
		}
	}
	dir, err := applyOptions(opts).dir()
	if err != nil {
		return nil, fileErr("text", name, "%v", err)
	}
	target := filepath.Join(dir, "tokens-"+hex.EncodeToString(h.Sum(nil))+".bin")
	if !cacheSound(target) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fileErr("text", name, "cache: %v", err)
		}
		if err := writeTextShard(target, paths, enc, vocab); err != nil {
			return nil, err
		}
	}
	if opt.Vocab == 0 {
		opt.Vocab = vocab
	}
	d, err := OpenShards(target, opt)
	if err != nil {
		return nil, err
	}
	d.format = "text"
	return d, nil
}

// hashFile adds a file's length and content to h.
func hashFile(h io.Writer, p string) error {
	f, st, err := regularfile.Open(p)
	if err != nil {
		return openErr("text", p, err)
	}
	defer f.Close()
	fmt.Fprintf(h, "%d\n", st.Size())
	if _, err := io.Copy(h, f); err != nil {
		return &Error{Format: "text", Path: p, Record: -1, Err: err}
	}
	return nil
}

// writeTextShard streams the tokens of paths into an llm.c shard at
// target, then writes its sidecar.
func writeTextShard(target string, paths []string, enc TextEncoder, vocab int) error {
	width, magic, version := 2, int32(ShardMagicGPT2), int32(1)
	if vocab > 1<<16 {
		width, magic, version = 4, ShardMagicLlama3, 7
	}
	crc := crc32.New(castagnoli)
	var size int64
	err := writeAtomic(target, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if _, err := bw.Write(make([]byte, ShardHeaderBytes)); err != nil {
			return err
		}
		var n int64
		buf := make([]byte, 0, 64<<10)
		for _, p := range paths {
			f, _, err := regularfile.Open(p)
			if err != nil {
				return openErr("text", p, err)
			}
			err = enc.EncodeReader(bufio.NewReaderSize(f, 1<<20), func(ids []int) error {
				for _, id := range ids {
					if width == 2 {
						buf = binary.LittleEndian.AppendUint16(buf, uint16(id))
					} else {
						buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
					}
				}
				n += int64(len(ids))
				_, err := bw.Write(buf)
				buf = buf[:0]
				return err
			})
			f.Close()
			if err != nil {
				return &Error{Format: "text", Path: p, Record: -1, Err: err}
			}
		}
		if n > math.MaxInt32 {
			return fileErr("text", paths[0], "%d tokens do not fit one llm.c shard (at most %d)", n, math.MaxInt32)
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		hdr := make([]byte, 12)
		binary.LittleEndian.PutUint32(hdr[0:], uint32(magic))
		binary.LittleEndian.PutUint32(hdr[4:], uint32(version))
		binary.LittleEndian.PutUint32(hdr[8:], uint32(n))
		f := w.(*os.File)
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return err
		}
		// The sidecar's CRC covers the finished file.
		size = ShardHeaderBytes + n*int64(width)
		_, err := io.Copy(crc, io.NewSectionReader(f, 0, size))
		return err
	})
	if err != nil {
		if e, ok := err.(*Error); ok {
			return e
		}
		return fileErr("text", paths[0], "%v", err)
	}
	sum := fmt.Sprintf(sumFormat, size, crc.Sum32())
	if err := writeAtomic(target+".sum", func(w io.Writer) error {
		_, err := io.WriteString(w, sum)
		return err
	}); err != nil {
		return fileErr("text", paths[0], "%v", err)
	}
	return nil
}
