package data

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func seqTokens(n int, base int32) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}

func TestShardsSequential(t *testing.T) {
	dir := t.TempDir()
	writeShardFile(t, filepath.Join(dir, "s_000.bin"), seqTokens(25, 0))      // 3 windows of 8
	writeShardFile(t, filepath.Join(dir, "s_001.bin"), seqTokens(9, 1000))    // 1
	writeShardFile(t, filepath.Join(dir, "s_002.bin"), seqTokens(5, 2000))    // too short: 0
	writeShardFile(t, filepath.Join(dir, "s_003.bin"), seqTokens(17, 100000)) // uint32 tokens: 2
	for _, pattern := range []string{filepath.Join(dir, "s_*.bin"), dir} {
		ds, err := OpenShards(pattern, WindowOptions{Context: 8})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Len() != 6 || ds.Tokens() != 56 || ds.Vocab() != 128256 {
			t.Fatalf("%d windows over %d tokens (vocab %d), want 6 over 56 (vocab 128256)", ds.Len(), ds.Tokens(), ds.Vocab())
		}
		starts := []int32{0, 8, 16, 1000, 100000, 100008}
		for i, s := range starts {
			ex, err := ds.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			w := ex.(Window)
			if !slices.Equal(w.Input, seqTokens(8, s)) || !slices.Equal(w.Target, seqTokens(8, s+1)) {
				t.Errorf("window %d: %v -> %v, want to start at %d", i, w.Input, w.Target, s)
			}
		}
		ds.Close()
	}
}

func TestShardsRandomWindows(t *testing.T) {
	dir := t.TempDir()
	p := writeShardFile(t, filepath.Join(dir, "a.bin"), seqTokens(1000, 0))
	opt := WindowOptions{Context: 16, Random: true, Seed: 4, Windows: 300}
	ds, err := OpenShards(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if ds.Len() != 300 {
		t.Fatalf("Len %d, want 300", ds.Len())
	}
	starts := map[int32]bool{}
	for i := range 300 {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		w := ex.(Window)
		if !slices.Equal(w.Input, seqTokens(16, w.Input[0])) || w.Target[15] != w.Input[0]+16 || w.Input[0] > 1000-17 {
			t.Fatalf("window %d is not a contiguous run inside the shard: %v", i, w.Input)
		}
		starts[w.Input[0]] = true
	}
	if len(starts) < 200 {
		t.Errorf("300 random windows start at only %d places", len(starts))
	}
	again, _ := OpenShards(p, opt)
	defer again.Close()
	a, _ := ds.Get(77)
	b, _ := again.Get(77)
	if a.(Window).Input[0] != b.(Window).Input[0] {
		t.Error("the same seed places window 77 differently")
	}
}

func TestShardCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := writeShardFile(t, filepath.Join(dir, "good.bin"), seqTokens(100, 0))
	for _, tc := range []struct {
		name string
		file []byte
		opt  WindowOptions
		want string
	}{
		{"short", make([]byte, 100), WindowOptions{Context: 4}, "file holds 100 bytes, too short for the 1024-byte header"},
		{"magic", shardBytes(12345, 1, 0, nil), WindowOptions{Context: 4}, "bad magic 12345: want 20240520 (uint16 tokens) or 20240801 (uint32 tokens)"},
		{"version", shardBytes(ShardMagicGPT2, 2, 0, nil), WindowOptions{Context: 4}, "magic 20240520 with version 2: want version 1"},
		{"version7", shardBytes(ShardMagicLlama3, 1, 0, nil), WindowOptions{Context: 4}, "magic 20240801 with version 1: want version 7"},
		{"negative", shardBytes(ShardMagicGPT2, 1, -5, nil), WindowOptions{Context: 4}, "header says -5 tokens"},
		{"payload", shardBytes(ShardMagicGPT2, 1, 1000, make([]byte, 20)), WindowOptions{Context: 4}, "header says 1000 tokens (2000 bytes), file holds 20 bytes of tokens"},
		{"payload32", shardBytes(ShardMagicLlama3, 7, 10, make([]byte, 44)), WindowOptions{Context: 4}, "header says 10 tokens (40 bytes), file holds 44 bytes of tokens"},
		{"fewtokens", shardBytes(ShardMagicGPT2, 1, 3, make([]byte, 6)), WindowOptions{Context: 4}, "holds 3 tokens, fewer than context+1 = 5"},
		{"context", shardBytes(ShardMagicGPT2, 1, 3, make([]byte, 6)), WindowOptions{Context: 0}, "context 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(dir, tc.name+".bin"), tc.file)
			ds, err := OpenShards(p, tc.opt)
			if err == nil {
				ds.Close()
			}
			wantErr(t, err, "shard: "+p+": ", tc.want)
		})
	}
	t.Run("oneBadAmongMany", func(t *testing.T) {
		sub := filepath.Join(dir, "many")
		writeShardFile(t, filepath.Join(sub, "0.bin"), seqTokens(100, 0))
		bad := writeFile(t, filepath.Join(sub, "1.bin"), shardBytes(ShardMagicGPT2, 1, 50, make([]byte, 10)))
		_, err := OpenShards(filepath.Join(sub, "*.bin"), WindowOptions{Context: 4})
		wantErr(t, err, "shard: "+bad+": header says 50 tokens")
	})
	t.Run("missing", func(t *testing.T) {
		_, err := OpenShards(filepath.Join(dir, "nope.bin"), WindowOptions{Context: 4})
		wantErr(t, err, "nope.bin: no such file or directory")
		_, err = OpenShards(filepath.Join(dir, "nope_*.bin"), WindowOptions{Context: 4})
		wantErr(t, err, "nope_*.bin: pattern matches no files")
		_, err = OpenShards(t.TempDir(), WindowOptions{Context: 4})
		wantErr(t, err, "directory holds no *.bin shards")
	})
	t.Run("vocab", func(t *testing.T) {
		ds, err := OpenShards(good, WindowOptions{Context: 10, Vocab: 50})
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		if _, err := ds.Get(3); err != nil {
			t.Fatal(err)
		}
		_, err = ds.Get(4)
		wantErr(t, err, "shard: "+good+": record 4: token 50 at position 50 is outside the vocabulary of 50")
	})
	t.Run("shrunk", func(t *testing.T) {
		p := writeShardFile(t, filepath.Join(dir, "shrink.bin"), seqTokens(100, 0))
		ds, err := OpenShards(p, WindowOptions{Context: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		os.Truncate(p, ShardHeaderBytes+2*50)
		_, err = ds.Get(7)
		wantErr(t, err, "shard: "+p+": record 7: read tokens 70 to 80: unexpected EOF")
	})
}

func TestWriteShardFormats(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		tokens []int32
		magic  uint32
		size   int64
	}{
		{[]int32{1, 2, 65535}, ShardMagicGPT2, ShardHeaderBytes + 6},
		{[]int32{1, 2, 65536}, ShardMagicLlama3, ShardHeaderBytes + 12},
	} {
		p := writeShardFile(t, filepath.Join(dir, "f.bin"), tc.tokens)
		b, _ := os.ReadFile(p)
		if binary.LittleEndian.Uint32(b) != tc.magic || int64(len(b)) != tc.size {
			t.Errorf("tokens %v: magic %d, %d bytes; want %d, %d", tc.tokens, binary.LittleEndian.Uint32(b), len(b), tc.magic, tc.size)
		}
		ds, err := OpenShards(p, WindowOptions{Context: 2})
		if err != nil {
			t.Fatal(err)
		}
		ex, _ := ds.Get(0)
		if w := ex.(Window); !slices.Equal(w.Input, tc.tokens[:2]) || !slices.Equal(w.Target, tc.tokens[1:]) {
			t.Errorf("read back %v -> %v, wrote %v", w.Input, w.Target, tc.tokens)
		}
		ds.Close()
	}
	if err := WriteShard(new(discard), []int32{-1}); err == nil {
		t.Error("negative token: no error")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// makeBigShard writes a 2 GiB uint16 shard: the header, a marked run of
// tokens at the start and at the end, and zeros (a sparse hole) between.
func makeBigShard(t testing.TB, path string) (ntok int64, head, tail []int32) {
	t.Helper()
	const size = 2 << 30
	ntok = (size - ShardHeaderBytes) / 2
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mark := func(off int64, base int) []int32 {
		toks := make([]int32, 1<<16)
		b := make([]byte, 2*len(toks))
		for i := range toks {
			toks[i] = int32(1 + (base+i)%50000)
			binary.LittleEndian.PutUint16(b[2*i:], uint16(toks[i]))
		}
		if _, err := f.WriteAt(b, ShardHeaderBytes+2*off); err != nil {
			t.Fatal(err)
		}
		return toks
	}
	if _, err := f.WriteAt(shardBytes(ShardMagicGPT2, 1, int32(ntok), nil), 0); err != nil {
		t.Fatal(err)
	}
	head = mark(0, 0)
	tail = mark(ntok-1<<16, 7)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return ntok, head, tail
}

func TestShardsLargeBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("makes a 2 GiB (sparse) file")
	}
	path := filepath.Join(t.TempDir(), "big.bin")
	ntok, head, tail := makeBigShard(t, path)
	const ctxLen = 1024

	// Sequential windows read the marked runs at both ends.
	seq, err := OpenShards(path, WindowOptions{Context: ctxLen})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Size() != 2<<30 || seq.Tokens() != ntok {
		t.Fatalf("file of %d bytes, %d tokens", st.Size(), seq.Tokens())
	}
	first, _ := seq.Get(0)
	if !slices.Equal(first.(Window).Input, head[:ctxLen]) {
		t.Error("window 0 does not hold the first tokens")
	}
	lastIdx := seq.Len() - 1
	last, err := seq.Get(lastIdx)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(lastIdx)*ctxLen - (ntok - 1<<16)
	if !slices.Equal(last.(Window).Target, tail[off+1:off+1+ctxLen]) {
		t.Error("the last window does not hold the last tokens")
	}
	seq.Close()

	hw := newHeapWatch()
	ds, err := OpenShards(path, WindowOptions{Context: ctxLen, Random: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	l, err := NewLoader(ds, LoaderConfig{Batch: 64, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for b, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.InputShape, []int{64, ctxLen}) || len(b.Tokens) != 64*ctxLen {
			t.Fatalf("batch shape %v", b.InputShape)
		}
		hw.sample()
		if batches++; batches == 200 {
			break
		}
	}
	t.Logf("200 random batches of 64x%d from a %d-token (2 GiB) shard: heap in use grew by at most %.1f MiB", ctxLen, ntok, float64(hw.growth())/(1<<20))
	if hw.growth() > heapBound {
		t.Errorf("heap in use grew by %d MiB, bound %d MiB", hw.growth()>>20, heapBound>>20)
	}
}
