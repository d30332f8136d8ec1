package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// byteTokenizer writes a byte-level tokenizer.json (256 byte tokens, no
// merges, <|endoftext|> at 256) into dir and returns its path.
func byteTokenizer(t *testing.T, dir string) string {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	raw, _ := json.Marshal(map[string]any{
		"added_tokens":  []any{map[string]any{"id": 256, "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel"},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	p := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// recordsConfig is a tiny Llama fine-tuned on records at path.
func recordsConfig(t *testing.T, tok, path string) Config {
	c := Default()
	c.Model = ModelConfig{Name: "llama", Layers: 2, Width: 32, Heads: 4, KVHeads: 2, Context: 1024}
	c.Data.Path, c.Data.Tokenizer, c.Data.ValSplit = path, tok, 0
	c.Optim.Steps, c.Output.Quiet, c.Output.EvalEvery = 1, true, 0
	return c
}

// firstLoss is the loss of cfg's first step.
func firstLoss(t *testing.T, cfg Config) float64 {
	t.Helper()
	tr := newTrainer(t, cfg)
	var loss float64
	tr.Hooks.AfterStep = func(tr *Trainer, r Record) error {
		loss = r.Loss
		return nil
	}
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return loss
}

// TestPackedStepEqualsUnpacked: one step over the same eight examples,
// packed into one window (-pack -batch 1 -context 1024) or one example a
// row (-batch 8), has the same loss: the mean over the trained tokens,
// attention kept inside each example, positions restarting. (Issue #34.)
func TestPackedStepEqualsUnpacked(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	tok := byteTokenizer(t, dir)
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, `{"prompt": "Question %d: what comes after %s?", "completion": " The answer is %s and then %s."}`+"\n",
			i, strings.Repeat("a", 3+5*i), strings.Repeat("b", 2+3*i), strings.Repeat("c", 1+7*(i%3)))
	}
	path := filepath.Join(dir, "pc.jsonl")
	os.WriteFile(path, []byte(b.String()), 0o644)
	for _, amp := range []string{"off", "bf16"} {
		t.Run("amp "+amp, func(t *testing.T) {
			packed := recordsConfig(t, tok, path)
			packed.Data.Pack, packed.Optim.Batch, packed.Precision.AMP = true, 1, amp
			unpacked := recordsConfig(t, tok, path)
			unpacked.Optim.Batch, unpacked.Precision.AMP = 8, amp
			p, u := firstLoss(t, packed), firstLoss(t, unpacked)
			t.Logf("packed %v, unpacked %v", p, u)
			tol := 1e-6
			if amp == "bf16" {
				tol = 1e-5 // the padded batch's products may round other partial sums
			}
			if math.Abs(p-u) > tol*math.Abs(u) || math.IsNaN(p) {
				t.Errorf("packed loss %v, unpacked %v", p, u)
			}
		})
	}
}

// TestRecordsParquetEqualsJSONL: the same prompt/completion records from
// JSON Lines and from parquet give the same first-step loss (issue #34).
func TestRecordsParquetEqualsJSONL(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	tok := byteTokenizer(t, dir)
	for _, pack := range []bool{false, true} {
		var loss [2]float64
		for i, f := range []string{"prompt_completion.jsonl", "prompt_completion.parquet"} {
			c := recordsConfig(t, tok, filepath.Join("..", "data", "testdata", "records", f))
			c.Model.Context, c.Optim.Batch, c.Data.Pack = 256, 4, pack
			if pack {
				c.Optim.Batch = 1 // the seven records fill one window
			}
			loss[i] = firstLoss(t, c)
		}
		if loss[0] != loss[1] || math.IsNaN(loss[0]) {
			t.Errorf("-pack %v: JSON Lines' first loss %v, parquet's %v", pack, loss[0], loss[1])
		}
	}
}

// TestLossOnAnswersTrainsFewerTokens: -loss-on all trains the prompts too;
// the evaluation reports perplexity over the held-out trained tokens; the
// summary counts the trained tokens.
func TestLossOnAnswersTrainsFewerTokens(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	tok := byteTokenizer(t, dir)
	var tokens [2]int64
	for i, on := range []string{"", "all"} {
		c := recordsConfig(t, tok, filepath.Join("..", "data", "testdata", "records", "prompt_completion.jsonl"))
		c.Model.Context, c.Optim.Batch, c.Data.LossOn, c.Data.ValSplit = 256, 2, on, 0.2
		tr := newTrainer(t, c)
		s, err := tr.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = s.TrainedTokens
		if s.Eval.Perplexity == nil || math.Abs(*s.Eval.Perplexity-math.Exp(s.Eval.Loss)) > 1e-9**s.Eval.Perplexity || s.Eval.Tokens == 0 {
			t.Errorf("-loss-on %q: evaluation %+v, want the perplexity of its loss over its trained tokens", on, s.Eval)
		}
	}
	if !(tokens[0] > 0 && tokens[0] < tokens[1]) {
		t.Errorf("trained tokens: %d on the answers, %d on all", tokens[0], tokens[1])
	}
}

// TestPlanMatchesMeasuredPeakRecords: -plan of a run on fine-tuning
// records, packed or padded, equals the measured peak when its batches
// are as long as the context (a batch padded to a shorter longest row
// takes less than the plan, which is its bound).
func TestPlanMatchesMeasuredPeakRecords(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CACHE", filepath.Join(dir, "cache"))
	tok := byteTokenizer(t, dir)
	const window = 64
	var b strings.Builder
	for i := range 16 {
		// window bytes and the EOS: window positions.
		fmt.Fprintf(&b, `{"text": %q}`+"\n", strings.Repeat(string(rune('a'+i)), window))
	}
	path := filepath.Join(dir, "text.jsonl")
	os.WriteFile(path, []byte(b.String()), 0o644)
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"padded", func(*Config) {}},
		{"packed", func(c *Config) { c.Data.Pack = true }},
		{"packed bf16 checkpoint accum", func(c *Config) {
			c.Data.Pack, c.Precision.AMP, c.Memory.Checkpoint, c.Memory.Accum = true, "bf16", "every", 2
		}},
		{"packed lora full head", func(c *Config) { c.Data.Pack, c.Memory.LoRA.Rank, c.Memory.LMHead = true, 4, "full" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := recordsConfig(t, tok, path)
			cfg.Model.Context, cfg.Optim.Batch, cfg.Optim.Steps = window, 4, planSteps
			c.set(&cfg)
			runAsPlanned(t, cfg)
		})
	}
}

// TestChatPromptIsRendered: -generate -chat renders -prompt as a user's
// message with the tokenizer's chat template and its generation prompt;
// without a template it is an error naming -chat.
func TestChatPromptIsRendered(t *testing.T) {
	dir := t.TempDir()
	tok := byteTokenizer(t, dir)
	cfg := recordsConfig(t, tok, "")
	cfg.Data.Path, cfg.Model.Context = "", 128
	cfg.Generate.Tokens, cfg.Generate.Prompt, cfg.Generate.Chat = 3, "hi", true
	tr := newTrainer(t, cfg)
	if _, err := tr.GenerateText(); err == nil || !strings.Contains(err.Error(), "-chat") {
		t.Fatalf("-chat without a template: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}`), 0o644)
	tr = newTrainer(t, cfg)
	c, ok := tr.codec.(tokenizerCodec)
	if !ok {
		t.Fatalf("codec %T", tr.codec)
	}
	ids, err := c.EncodeChat("hi")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Decode(ids); got != "<user>hi<assistant>" {
		t.Errorf("the chat prompt encodes %q", got)
	}
	if _, err := tr.GenerateText(); err != nil {
		t.Fatal(err)
	}
}
