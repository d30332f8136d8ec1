package data

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchLoader delivers b.N batches (wrapping epochs) and reports examples
// per second.
func benchLoader(b *testing.B, l *Loader) {
	b.Helper()
	examples := 0
	b.ResetTimer()
	start := time.Now()
	for n := 0; n < b.N; {
		for batch, err := range l.All(context.Background()) {
			if err != nil {
				b.Fatal(err)
			}
			examples += batch.Len()
			if n++; n == b.N {
				break
			}
		}
	}
	b.ReportMetric(float64(examples)/time.Since(start).Seconds(), "examples/s")
}

func BenchmarkLoaderFashionMNIST(b *testing.B) {
	if _, err := os.Stat(FashionMNISTDir); err != nil {
		b.Skipf("Fashion-MNIST is not installed in %s (apt-get install dataset-fashion-mnist)", FashionMNISTDir)
	}
	ds, err := FashionMNIST(FashionMNISTDir, true, CacheDir(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Close()
	l, _ := NewLoader(ds, LoaderConfig{Batch: 64, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 4})
	benchLoader(b, l)
}

func BenchmarkLoaderShards(b *testing.B) {
	dir := b.TempDir()
	toks := make([]int32, 16<<20)
	for i := range toks {
		toks[i] = int32(i*2654435761>>7) & 0xffff
	}
	writeShardFile(b, filepath.Join(dir, "bench.bin"), toks)
	ds, err := OpenShards(filepath.Join(dir, "bench.bin"), WindowOptions{Context: 1024, Random: true, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Close()
	l, _ := NewLoader(ds, LoaderConfig{Batch: 64, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 4})
	benchLoader(b, l)
}

func BenchmarkLoaderSpirals(b *testing.B) {
	ds, _ := NewSpirals(SpiralsConfig{})
	l, _ := NewLoader(ds, LoaderConfig{Batch: 64, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 4})
	benchLoader(b, l)
}
