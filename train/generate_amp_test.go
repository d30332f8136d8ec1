package train

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/memory"
)

// TestPlanGenerateAutocastMatchesMeasured: -generate runs under -amp
// (its KV cache in the autocast dtype, half an f32 one's bytes), and
// -plan predicts that run to the byte, as measured by the allocator:
// the KV cache, the temporaries (the step's 16-bit copies of the
// weights) and the total. -weights bf16 keeps generating with or without
// -amp.
func TestPlanGenerateAutocastMatchesMeasured(t *testing.T) {
	// 2 layers × keys and values × 13 positions (4 of prompt, 9 more):
	// GPT: width 32; Llama: 2 KV heads of 64/4.
	const cells = 2 * 2 * 13 * 32
	for _, c := range []struct {
		model, amp, weights string
		size                int64 // bytes per cached value
	}{
		{"gpt", "off", "f32", 4},
		{"gpt", "bf16", "f32", 2},
		{"gpt", "fp16", "f32", 2},
		{"gpt", "off", "bf16", 2},
		{"gpt", "bf16", "bf16", 2},
		{"llama", "off", "f32", 4},
		{"llama", "bf16", "f32", 2},
		{"llama", "fp16", "f32", 2},
		{"llama", "bf16", "bf16", 2},
	} {
		name := fmt.Sprintf("%s -amp %s -weights %s", c.model, c.amp, c.weights)
		cfg := tinyGPT()
		if c.model == "llama" {
			cfg = tinyLlama()
		}
		cfg.Precision.AMP, cfg.Precision.Weights = c.amp, c.weights
		cfg.Generate.Tokens, cfg.Generate.Prompt = 9, "1 2 3 4"
		pred, err := Plan(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr := newTrainer(t, cfg)
		mem := tr.Device.Memory()
		mem.ResetPeak()
		out, err := tr.GenerateText()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := len(strings.Fields(out)); n != 9 {
			t.Errorf("%s: generated %q, want 9 tokens", name, out)
		}
		got := peakBytes(mem.Stats())
		if want := cells * c.size; pred.KVCache != want || got.KVCache != want {
			t.Errorf("%s: KV cache predicted %d bytes, measured %d, want %d", name, pred.KVCache, got.KVCache, want)
		}
		if pred.Total != got.Total || pred.Parameter != got.Parameter || pred.Temporary != got.Temporary || pred.Activation != got.Activation {
			t.Errorf("%s: predicted total %d (parameters %d, temporaries %d, activations %d), measured %d (%d, %d, %d)",
				name, pred.Total, pred.Parameter, pred.Temporary, pred.Activation, got.Total, got.Parameter, got.Temporary, got.Activation)
		}
		if got.Gradient != 0 {
			t.Errorf("%s: generation allocated %d bytes of gradients", name, got.Gradient)
		}
	}
}

// TestEvalSampleUnderAutocast: the sample a text model writes at an
// evaluation is generated under the run's -amp: its KV cache holds
// bf16, half the bytes of the same run's without -amp.
func TestEvalSampleUnderAutocast(t *testing.T) {
	text := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	kv := map[string]int64{}
	for _, amp := range []string{"off", "bf16"} {
		cfg := tinyGPT()
		cfg.Data.Path, cfg.Precision.AMP = text, amp
		tr := newTrainer(t, cfg)
		mem := tr.Device.Memory()
		mem.ResetPeak()
		if s := tr.evalSample(); s == "" {
			t.Fatalf("-amp %s: no evaluation sample", amp)
		}
		kv[amp] = mem.Stats().Category(memory.KVCache).Peak
	}
	// Context 16: 1 token of prompt and 15 more, 2 layers × keys and
	// values × width 32.
	if want := int64(2 * 2 * 16 * 32 * 4); kv["off"] != want || kv["bf16"] != want/2 {
		t.Errorf("evaluation sample's KV cache: %d bytes without -amp, %d with -amp bf16; want %d and %d", kv["off"], kv["bf16"], want, want/2)
	}
}
