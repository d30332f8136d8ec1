package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/regularfile"
)

// The llm.c token shard header: 256 little-endian int32, of which the
// first three are the magic number, the version and the token count.
const (
	ShardHeaderBytes = 256 * 4
	ShardMagicGPT2   = 20240520 // version 1, uint16 tokens
	ShardMagicLlama3 = 20240801 // version 7, uint32 tokens
)

// parseShard checks the header of a shard of the given size and returns
// its token count and token width in bytes.
func parseShard(r io.ReaderAt, size int64) (ntok int64, width int, err error) {
	if size < ShardHeaderBytes {
		return 0, 0, fmt.Errorf("file holds %d bytes, too short for the %d-byte header", size, ShardHeaderBytes)
	}
	var h [12]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return 0, 0, fmt.Errorf("read header: %w", err)
	}
	magic := int32(binary.LittleEndian.Uint32(h[0:]))
	version := int32(binary.LittleEndian.Uint32(h[4:]))
	n := int32(binary.LittleEndian.Uint32(h[8:]))
	var want int32
	switch magic {
	case ShardMagicGPT2:
		want, width = 1, 2
	case ShardMagicLlama3:
		want, width = 7, 4
	default:
		return 0, 0, fmt.Errorf("bad magic %d: want %d (uint16 tokens) or %d (uint32 tokens)", magic, ShardMagicGPT2, ShardMagicLlama3)
	}
	if version != want {
		return 0, 0, fmt.Errorf("magic %d with version %d: want version %d", magic, version, want)
	}
	if n < 0 {
		return 0, 0, fmt.Errorf("header says %d tokens", n)
	}
	need, have := int64(n)*int64(width), size-ShardHeaderBytes
	if need != have {
		return 0, 0, fmt.Errorf("header says %d tokens (%d bytes), file holds %d bytes of tokens", n, need, have)
	}
	return int64(n), width, nil
}

// OpenShards opens the llm.c token shards that pattern names: a file, a
// glob (files in name order) or a directory (its *.bin files). Every
// header is checked against its file's size now; tokens are read by Get.
func OpenShards(pattern string, opt WindowOptions) (*TokenDataset, error) {
	paths, err := shardPaths(pattern)
	if err != nil {
		return nil, err
	}
	var files []tokenFile
	var closers []io.Closer
	fail := func(e *Error) (*TokenDataset, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, e
	}
	for _, p := range paths {
		f, st, err := regularfile.Open(p)
		if err != nil {
			return fail(openErr("shard", p, err))
		}
		closers = append(closers, f)
		ntok, width, err := parseShard(f, st.Size())
		if err != nil {
			return fail(&Error{Format: "shard", Path: p, Record: -1, Err: err})
		}
		files = append(files, tokenFile{name: p, r: f, off: ShardHeaderBytes, ntok: ntok, width: width})
	}
	return newTokenDataset("shard", pattern, files, closers, opt)
}

func shardPaths(pattern string) ([]string, error) {
	if st, err := os.Stat(pattern); err == nil {
		if !st.IsDir() {
			return []string{pattern}, nil
		}
		paths, _ := filepath.Glob(filepath.Join(globEscape(pattern), "*.bin"))
		if len(paths) == 0 {
			return nil, fileErr("shard", pattern, "directory holds no *.bin shards")
		}
		return paths, nil
	}
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fileErr("shard", pattern, "bad pattern: %v", err)
	}
	if len(paths) == 0 {
		if !hasMeta(pattern) {
			return nil, fileErr("shard", pattern, "no such file or directory")
		}
		return nil, fileErr("shard", pattern, "pattern matches no files")
	}
	return paths, nil
}

func hasMeta(p string) bool {
	for _, c := range p {
		switch c {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}

func globEscape(p string) string {
	out := make([]rune, 0, len(p))
	for _, c := range p {
		if c == '*' || c == '?' || c == '[' || c == '\\' {
			out = append(out, '\\')
		}
		out = append(out, c)
	}
	return string(out)
}

// WriteShard writes tokens as an llm.c shard to w: magic 20240520 with
// uint16 tokens when every token fits, else magic 20240801 with uint32
// tokens. It is how tests and tools make shards.
func WriteShard(w io.Writer, tokens []int32) error {
	width, magic, version := 2, int32(ShardMagicGPT2), int32(1)
	for _, t := range tokens {
		if t < 0 {
			return fmt.Errorf("shard: negative token %d", t)
		}
		if t > 0xffff {
			width, magic, version = 4, ShardMagicLlama3, 7
		}
	}
	if int64(len(tokens)) > 1<<31-1 {
		return fmt.Errorf("shard: %d tokens do not fit one shard", len(tokens))
	}
	hdr := make([]byte, ShardHeaderBytes)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(magic))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(version))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(tokens)))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	buf := make([]byte, 0, 64<<10)
	for _, t := range tokens {
		if width == 2 {
			buf = binary.LittleEndian.AppendUint16(buf, uint16(t))
		} else {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		if len(buf) >= 64<<10-4 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err := w.Write(buf)
	return err
}
