package hf_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/nn"
)

// fuzzConfig fuzzes a config.json reader over a fixture's tensors: any
// bytes give an error or a config within the bounds, whose Params is
// positive; a config small enough to build cheaply is also loaded, which
// must succeed or fail with an error, never a panic. Seeds: the
// fixture's config.json and testdata/fuzz/<target>.
func fuzzConfig(f *testing.F, fixture string, read func(c *hf.Checkpoint) (params int64, err error)) {
	cfg, err := os.ReadFile(filepath.Join(fixture, "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg)
	dir := f.TempDir()
	b, err := os.ReadFile(filepath.Join(fixture, "model.safetensors"))
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
		f.Fatal(err)
	}
	c, err := hf.Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	f.Fuzz(func(t *testing.T, config []byte) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
			t.Fatal(err)
		}
		params, err := read(c)
		if err != nil {
			return
		}
		if params <= 0 || params > math.MaxInt64/8 {
			t.Fatalf("accepted a config of %d parameters", params)
		}
		if params > 1<<20 {
			return
		}
		m, _, err := hf.Load(cpu.New(), dir, hf.Options{})
		if err == nil {
			nn.Release(m)
		}
	})
}

func FuzzReadGPT2Config(f *testing.F) {
	fuzzConfig(f, "testdata/gpt2-f32", func(c *hf.Checkpoint) (int64, error) {
		cfg, _, err := hf.ReadGPT2Config(c)
		if err != nil {
			return 0, err
		}
		if cfg.Layers > hf.MaxLayers || cfg.Dim > hf.MaxWidth || cfg.Vocab > hf.MaxVocab || cfg.Positions > hf.MaxPositions || cfg.Heads < 1 {
			return 0, nil // reported as 0 parameters: a bound not held
		}
		return cfg.Params(), nil
	})
}

// FuzzReadDecoderConfig fuzzes config.json of every decoder family over
// a Llama's tensors (seeds: each family fixture's config.json too).
func FuzzReadDecoderConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/config.json")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	fuzzConfig(f, "testdata/llama3-f32", func(c *hf.Checkpoint) (int64, error) {
		cfg, _, err := hf.ReadDecoderConfig(c)
		if err != nil {
			return 0, err
		}
		if cfg.Layers > hf.MaxLayers || cfg.Dim > hf.MaxWidth || cfg.Hidden > hf.MaxMLPWidth || cfg.Vocab > hf.MaxVocab ||
			cfg.Positions > hf.MaxPositions || cfg.Heads < 1 || cfg.KVHeads < 1 || cfg.KVHeads > cfg.Heads {
			return 0, nil
		}
		return cfg.Params(), nil
	})
}
