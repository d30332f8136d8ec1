package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/internal/sttest"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

func loraGPT() Config {
	c := tinyGPT()
	c.Memory.LoRA.Rank, c.Memory.LoRA.Alpha, c.Memory.LoRA.Dropout, c.Optim.LR = 4, 8, 0.1, 1e-2
	c.Memory.LoRA.Targets = []string{"*.attn.qkv", "*.mlp.*"}
	return c
}

// TestLoRACheckpointHoldsAdapters: a LoRA run's checkpoint holds the
// adapters and their optimizer state, nothing of the base but its name
// and fingerprint.
func TestLoRACheckpointHoldsAdapters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lora.st")
	tr := saveAfter(t, loraGPT(), 3, path)
	var want []string
	for _, p := range tr.lora().adapted.Adapters {
		want = append(want, p.Name())
	}
	f := sttest.Read(t, path)
	var got []string
	for _, n := range f.Names() {
		if !strings.HasPrefix(n, OptimizerPrefix) {
			got = append(got, n)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("checkpoint weights %v, want the adapters %v", got, want)
	}
	// 2 blocks × (qkv A [4,32] B [96,4], fc A [4,32] B [128,4], proj A [4,128] B [32,4]).
	if len(want) != 12 || nn.Count(tr.Model)-countOf(tr.lora().adapted.Base) != 2*(4*32+96*4+4*32+128*4+4*128+32*4) {
		t.Errorf("%d adapter tensors of %d values", len(want), nn.Count(tr.Model)-countOf(tr.lora().adapted.Base))
	}
	meta := f.Meta(t)
	if meta["lora_base"] != loraBase(tr.Config) || meta["lora_base_crc32c"] != tr.lora().baseSum || len(tr.lora().baseSum) != 8 {
		t.Errorf("metadata names base %q (%q), want %q (%q)", meta["lora_base"], meta["lora_base_crc32c"], loraBase(tr.Config), tr.lora().baseSum)
	}
}

// TestLoRAResumeRefusesOtherBases: adapters resume only onto the base, and
// with the scale, they were trained with; a whole checkpoint does not
// resume into a LoRA run, nor adapters into a run without them.
func TestLoRAResumeRefusesOtherBases(t *testing.T) {
	dir := t.TempDir()
	adapters, whole := filepath.Join(dir, "lora.st"), filepath.Join(dir, "whole.st")
	saveAfter(t, loraGPT(), 2, adapters)
	plain := tinyGPT()
	saveAfter(t, plain, 2, whole)
	for _, c := range []struct {
		name string
		mod  func(*Config)
		path string
		want []string
	}{
		{"other-seed", func(c *Config) { c.Seed = 7 }, adapters, []string{"trained on the base gpt layers=2 width=32 heads=4 context=16, seed 1 (fingerprint", "seed 7 has fingerprint"}},
		{"other-alpha", func(c *Config) { c.Memory.LoRA.Alpha = 4 }, adapters, []string{"-lora-alpha 8", "this run has 4"}},
		{"other-rank", func(c *Config) { c.Memory.LoRA.Rank = 2 }, adapters, []string{"lora_a is [4 32] in the checkpoint but [2 32]"}},
		{"no-lora", func(c *Config) { *c = tinyGPT() }, adapters, []string{"holds LoRA adapters (rank 4)", "resume with -lora 4"}},
		{"whole-into-lora", func(c *Config) {}, whole, []string{"holds a whole model, not LoRA adapters"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := loraGPT()
			c.mod(&cfg)
			resumeFails(t, cfg.Resolved(), c.path, c.want...)
		})
	}
}

// TestLoRAExportMerges: -save-format hf writes a plain GPT-2 with the
// adapters merged, which computes what the adapted model does.
func TestLoRAExportMerges(t *testing.T) {
	cfg := loraGPT()
	cfg.Model.Dropout, cfg.Memory.LoRA.Dropout = 0, 0
	cfg.Optim.Steps, cfg.Output.SaveFormat, cfg.Output.Save = 4, "hf", filepath.Join(t.TempDir(), "gpt2")
	tr := newTrainer(t, cfg)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	dev := tr.Device
	g, _, err := hf.LoadGPT2(dev, cfg.Output.Save)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	if n := len(g.Parameters()); n != len(tr.lora().adapted.Base) {
		t.Errorf("the export has %d tensors, the base %d", n, len(tr.lora().adapted.Base))
	}
	ids := make([]int32, 2*cfg.Model.Context)
	for i := range ids {
		ids[i] = int32(i * 37 % 256)
	}
	tok, err := tensor.FromInt32(dev, ids, []int{2, cfg.Model.Context}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Release()
	forward := func(m nn.Module) (out []float64) {
		err := tensor.Step(func(s *tensor.Scope) error {
			out = m.Forward(nn.Eval(s), tok).Float64s()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := forward(tr.Model), forward(g)
	var d float64
	for i := range want {
		d = max(d, math.Abs(got[i]-want[i])/math.Max(1, math.Abs(want[i])))
	}
	if d > 1e-5 {
		t.Errorf("exported model's logits differ from the adapted model's by %g", d)
	}
}

// TestLoRAPlanGPT2Small: LoRA rank 8 on attention and MLP of a
// GPT-2-small-shaped model (GPT-2's vocabulary, context 1024, batch 8)
// with -amp bf16 -checkpoint every -accum 8 plans within 600 MiB, with
// gradients and Adam's state for the adapters alone, to the byte.
func TestLoRAPlanGPT2Small(t *testing.T) {
	cfg := Default()
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Width, cfg.Model.Heads, cfg.Model.Context, cfg.Optim.Batch = "gpt", 12, 768, 12, 1024, 8
	cfg.Data.Path, cfg.Precision.AMP, cfg.Memory.Checkpoint, cfg.Memory.Accum, cfg.Output.Quiet = largeVocabShard(t), "bf16", "every", 8, true
	cfg.Memory.LoRA.Rank, cfg.Memory.LoRA.Targets = 8, []string{"*.attn.*", "*.mlp.*"}
	p, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	WritePlan(&testWriter{t}, cfg, p)
	// Per block: qkv 8·768 + 2304·8, attn.proj 8·768 + 768·8, fc
	// 8·768 + 3072·8, mlp.proj 8·3072 + 768·8.
	adapters := int64(12 * (8*768 + 2304*8 + 8*768 + 768*8 + 8*768 + 3072*8 + 8*3072 + 768*8))
	if p.Gradient != 4*adapters || p.OptimizerState != 8*adapters {
		t.Errorf("gradients %d and optimizer state %d bytes, want %d and %d (the adapters')", p.Gradient, p.OptimizerState, 4*adapters, 8*adapters)
	}
	// The base is held in bf16: about 2 bytes for each of its 124.4M values.
	if base := int64(124_439_808); p.Parameter > 2*base+4*adapters+base/100 {
		t.Errorf("parameters %d bytes; a bf16 base and f32 adapters are %d", p.Parameter, 2*base+4*adapters)
	}
	if p.Total > 600<<20 {
		t.Errorf("planned total %s, want at most 600 MiB", memory.FormatBytes(p.Total))
	}
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestPlanGenerateMatchesMeasured: -plan with -generate predicts the
// generation's peak, KV cache to the byte, as the run measures it.
func TestPlanGenerateMatchesMeasured(t *testing.T) {
	for _, lora := range []int{0, 2} {
		cfg := tinyGPT()
		cfg.Memory.LoRA.Rank, cfg.Generate.Tokens, cfg.Generate.Prompt = lora, 9, "1 2 3 4"
		pred, err := Plan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tr := newTrainer(t, cfg)
		mem := tr.Device.Memory()
		mem.ResetPeak()
		if _, err := tr.GenerateText(); err != nil {
			t.Fatal(err)
		}
		got := peakBytes(mem.Stats())
		// 2 layers × keys and values × 13 positions × width 32 × 4 bytes.
		if want := int64(2 * 2 * 13 * 32 * 4); pred.KVCache != want || got.KVCache != want {
			t.Errorf("lora %d: KV cache predicted %d bytes, measured %d, want %d", lora, pred.KVCache, got.KVCache, want)
		}
		if pred.Total != got.Total || pred.Parameter != got.Parameter {
			t.Errorf("lora %d: predicted total %d (parameters %d), measured %d (%d)", lora, pred.Total, pred.Parameter, got.Total, got.Parameter)
		}
	}
}

// TestLoRAImportNeverHoldsF32Base: with -lora and -amp bf16 the imported
// base is made in bf16, so the parameters' peak is what they hold in
// training: no F32 copy of the model ever exists on the device.
func TestLoRAImportNeverHoldsF32Base(t *testing.T) {
	tokens := make([]int32, 4000)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 50) // within the fixture's vocabulary
	}
	shard := filepath.Join(t.TempDir(), "tokens.bin")
	f, err := os.Create(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := data.WriteShard(f, tokens); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg := Default()
	cfg.Model.Init, cfg.Data.Path, cfg.Optim.Batch, cfg.Optim.Steps, cfg.Output.Quiet, cfg.Output.EvalEvery = filepath.Join("..", "hf", "testdata", "gpt2-f32"), shard, 4, 2, true, 0
	cfg.Memory.LoRA.Rank, cfg.Precision.AMP = 4, "bf16"
	cfg, _, err = cfg.ApplyInit()
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, cfg)
	st := tr.Device.Memory().Stats().Category(memory.Parameter)
	var base, adapters int64
	for _, p := range tr.lora().adapted.Base {
		base += p.Bytes()
	}
	for _, p := range tr.lora().adapted.Adapters {
		adapters += p.Bytes()
		if p.DType() != tensor.F32 {
			t.Errorf("adapter %s is %v, want f32", p.Name(), p.DType())
		}
	}
	if st.Peak != base+adapters || st.Current != st.Peak {
		t.Errorf("parameters peaked at %d bytes (now %d); the bf16 base and f32 adapters are %d", st.Peak, st.Current, base+adapters)
	}
	if w := tr.lora().adapted.Base[0]; w.DType() != tensor.BF16 {
		t.Errorf("base %s is %v, want bf16", w.Name(), w.DType())
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLoRAZero3SaveResume: adapters trained on 2 ranks under ZeRO-3 save
// without the base, and resume on one process and on 2 ranks again to end
// where an uninterrupted one-process run ends.
func TestLoRAZero3SaveResume(t *testing.T) {
	cfg := tinyGPT()
	cfg.Model.Dropout, cfg.Optim.Batch, cfg.Data.Workers, cfg.Optim.Steps = 0, 4, 1, 10
	cfg.Memory.LoRA.Rank, cfg.Memory.LoRA.Alpha, cfg.Optim.LR = 4, 8, 1e-2
	one := cfg
	one.Optim.Batch = 8
	ref := newTrainer(t, one)
	if _, err := ref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := flatWeights(ref)

	dir := t.TempDir()
	first := cfg
	first.Parallel.Engine, first.Parallel.Zero, first.Optim.Steps, first.Output.Save = "mpi", 3, 4, filepath.Join(dir, "ck")
	runRanks(t, first, 2, nil)
	f := sttest.Read(t, first.Output.Save)
	for _, n := range f.Names() {
		if !strings.HasPrefix(n, OptimizerPrefix) && !strings.Contains(n, ".lora_") {
			t.Fatalf("the ZeRO-3 LoRA checkpoint holds %s", n)
		}
	}

	resumed := one
	resumed.Output.Resume = first.Output.Save
	tr := newTrainer(t, resumed)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := relDiff(flatWeights(tr), want); d > 1e-5 {
		t.Errorf("2 ranks (ZeRO 3) then 1 process: parameters differ by %.2g", d)
	}
	again := cfg
	again.Parallel.Engine, again.Parallel.Zero, again.Output.Resume = "mpi", 3, first.Output.Save
	trs, _ := runRanks(t, again, 2, nil)
	for r, tr := range trs {
		if d := relDiff(flatWeights(tr), want); d > 1e-5 {
			t.Errorf("2 ranks then 2 ranks (ZeRO 3), rank %d: parameters differ by %.2g", r, d)
		}
	}
}
