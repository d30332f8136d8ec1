package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestLegacyCheckpointsResume: checkpoints and summaries written before
// Config was grouped (testdata/legacy-*, made by that version of
// cmd/train) still read and resume, continuing exactly as that version
// continued them (the final losses it printed).
func TestLegacyCheckpointsResume(t *testing.T) {
	cases := []struct {
		name, file string
		cfg        func(*Config)
		loss       float64
	}{
		{"mlp", "legacy-mlp.safetensors", func(c *Config) {
			c.Model.Layers, c.Model.Width = 1, 16
		}, 2.887838125228882},
		{"gpt lora bf16 accum checkpoint", "legacy-gpt-lora.safetensors", func(c *Config) {
			c.Model = ModelConfig{Name: "gpt", Layers: 1, Width: 16, Heads: 2, Context: 8}
			c.Memory.LoRA.Rank, c.Precision.AMP, c.Memory.Accum, c.Memory.Checkpoint, c.Optim.Batch = 2, "bf16", 2, "every", 4
		}, 5.525538206100464},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := Default()
			cfg.Optim.Steps, cfg.Optim.Batch, cfg.Output.EvalEvery, cfg.Output.Quiet = 4, 8, 0, true
			tc.cfg(&cfg)
			cfg.Output.Resume = path
			dev, err := NewDevice(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := New(cfg, dev, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if tr.Step() != 2 {
				t.Fatalf("resumed at step %d, want 2", tr.Step())
			}
			s, err := tr.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.FinalLoss != tc.loss {
				t.Errorf("final loss %v, want %v (what the version that wrote the checkpoint continued to)", s.FinalLoss, tc.loss)
			}
		})
	}
}

// TestLegacySummaryReads: a -summary file of the flat layout reads into
// the grouped Config.
func TestLegacySummaryReads(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "legacy-summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	c := s.Config
	if c.Model.Name != "mlp" || c.Model.Layers != 1 || c.Model.Width != 16 || c.Optim.Name != "adam" || c.Optim.Batch != 8 ||
		c.Optim.Steps != 2 || c.Memory.Accum != 1 || c.Device.Name != "cpu" || c.Parallel.Engine != "off" || c.Seed != 1 ||
		c.Output.Save != "legacy-mlp.safetensors" || c.Data.ValSplit != 0.1 || c.Memory.LMHead != "chunked" {
		t.Errorf("legacy summary read as %+v", c)
	}
	// And the grouped layout round-trips.
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(back); string(again) != string(out) {
		t.Errorf("grouped JSON does not round-trip:\n%s\n%s", out, again)
	}
}
