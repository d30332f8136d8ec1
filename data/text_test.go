package data

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pairEncoder is a stand-in tokenizer: each byte b becomes token
// offset+b, read in small pieces; it counts the passes it makes.
type pairEncoder struct {
	offset, vocab int
	fp            string
	passes        int
}

func (e *pairEncoder) EncodeReader(r io.Reader, fn func([]int) error) error {
	e.passes++
	buf := make([]byte, 5)
	for {
		n, err := r.Read(buf)
		ids := make([]int, n)
		for i, b := range buf[:n] {
			ids[i] = e.offset + int(b)
		}
		if n > 0 {
			if err := fn(ids); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
func (e *pairEncoder) VocabSize() int      { return e.vocab }
func (e *pairEncoder) Fingerprint() string { return e.fp }

func TestTokenizeCorpus(t *testing.T) {
	for _, tc := range []struct {
		name          string
		offset, vocab int
		width         int
	}{
		{"uint16", 1000, 1256, 2},
		{"uint32", 70000, 70256, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cache := filepath.Join(dir, "cache")
			a := writeFile(t, filepath.Join(dir, "a.txt"), []byte("hello world, "))
			b := writeFile(t, filepath.Join(dir, "b.txt"), []byte("second file"))
			enc := &pairEncoder{offset: tc.offset, vocab: tc.vocab, fp: "v1"}
			open := func() *TokenDataset {
				d, err := TokenizeCorpus([]string{a, b}, enc, WindowOptions{Context: 4}, CacheDir(cache))
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			d := open()
			text := "hello world, second file"
			if d.Tokens() != int64(len(text)) || d.Vocab() != tc.vocab {
				t.Fatalf("%d tokens, vocab %d; want %d, %d", d.Tokens(), d.Vocab(), len(text), tc.vocab)
			}
			for i := 0; i < d.Len(); i++ {
				ex, err := d.Get(i)
				if err != nil {
					t.Fatal(err)
				}
				w := ex.(Window)
				for j := range w.Input {
					if want := int32(tc.offset) + int32(text[4*i+j]); w.Input[j] != want {
						t.Fatalf("window %d token %d = %d, want %d", i, j, w.Input[j], want)
					}
				}
			}
			d.Close()
			shards, _ := filepath.Glob(filepath.Join(cache, "tokens-*.bin"))
			if len(shards) != 1 {
				t.Fatalf("cache holds %v, want one shard", shards)
			}
			st, _ := os.Stat(shards[0])
			if want := int64(ShardHeaderBytes + len(text)*tc.width); st.Size() != want {
				t.Errorf("shard of %d bytes, want %d", st.Size(), want)
			}

			open().Close()
			if enc.passes != 2 { // one per file, the first time only
				t.Errorf("%d encoding passes, want 2: the cached shard was not reused", enc.passes)
			}
			// A damaged shard is rebuilt rather than read.
			if err := os.WriteFile(shards[0], bytes.Repeat([]byte{1}, int(st.Size())), 0o644); err != nil {
				t.Fatal(err)
			}
			open().Close()
			if enc.passes != 4 {
				t.Errorf("%d encoding passes, want 4: a damaged shard was used", enc.passes)
			}
			// Another tokenizer, another shard.
			enc.fp = "v2"
			open().Close()
			if shards, _ := filepath.Glob(filepath.Join(cache, "tokens-*.bin")); len(shards) != 2 {
				t.Errorf("cache holds %d shards after a second tokenizer, want 2", len(shards))
			}
		})
	}
}

func TestTokenizeCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	enc := &pairEncoder{vocab: 256, fp: "x"}
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"none", nil, "no files"},
		{"missing", []string{filepath.Join(dir, "nope.txt")}, "nope.txt: no such file"},
		{"directory", []string{dir}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TokenizeCorpus(tc.paths, enc, WindowOptions{Context: 4}, CacheDir(filepath.Join(dir, "c")))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
