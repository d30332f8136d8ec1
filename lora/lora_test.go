package lora_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

var (
	gptConfig   = models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 12, Vocab: 19, Seed: 3}
	llamaConfig = models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 16, Hidden: 24, Context: 12, Vocab: 19, Seed: 3}
)

// lm is a language model of package models.
type lm interface {
	nn.Model
	TokenLoss(r *nn.Run, tokens, targets *tensor.Tensor, o tensor.CrossEntropyOptions) *tensor.Tensor
}

// newModel builds a GPT or a Llama on dev.
func newModel(t *testing.T, kind string, dev device.Device) lm {
	t.Helper()
	var m lm
	var err error
	if kind == "llama" {
		m, err = models.NewDecoder(dev, llamaConfig)
	} else {
		m, err = models.NewGPT(dev, gptConfig)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(m) })
	return m
}

func newGPT(t *testing.T) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(cpu.New(), gptConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(g) })
	return g
}

// batch is a fixed batch of tokens and next-token targets.
func batch(t *testing.T, g lm) (tok, tgt *tensor.Tensor) {
	t.Helper()
	const b, n = 3, 10
	ids := make([]int32, b*n)
	next := make([]int32, b*n)
	for i := range ids {
		ids[i] = int32((7*i + i/n) % gptConfig.Vocab)
		next[i] = int32((7*i + 7 + i/n) % gptConfig.Vocab)
	}
	dev := g.Parameters()[0].Device()
	tok, err := tensor.FromInt32(dev, ids, []int{b, n}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	tgt, err = tensor.FromInt32(dev, next, []int{b, n}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tok.Release(); tgt.Release() })
	return tok, tgt
}

// step runs forward and backward of the token loss and returns the loss.
func step(t *testing.T, g lm, tok, tgt *tensor.Tensor) float64 {
	t.Helper()
	var loss float64
	err := tensor.Step(func(s *tensor.Scope) error {
		l := g.TokenLoss(nn.NewRun(s, 1), tok, tgt, tensor.CrossEntropyOptions{})
		l.Backward()
		loss = l.Item()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// logits returns the model's logits for tok, in inference mode.
func logits(t *testing.T, g lm, tok *tensor.Tensor) []float64 {
	t.Helper()
	var out []float64
	err := tensor.Step(func(s *tensor.Scope) error {
		out = g.Forward(nn.Eval(s), tok).Float64s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func maxRelDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(a[i]-b[i])/math.Max(1, math.Abs(b[i])))
	}
	return m
}

func TestAdaptedModelStartsAtItsBase(t *testing.T) {
	for _, kind := range []string{"gpt", "llama"} {
		t.Run(kind, func(t *testing.T) {
			g := newModel(t, kind, cpu.New())
			tok, tgt := batch(t, g)
			base := step(t, g, tok, tgt)
			baseLogits := logits(t, g, tok)
			ad, err := lora.Apply(g, nil, lora.Config{Rank: 4, Alpha: 8})
			if err != nil {
				t.Fatal(err)
			}
			// Every Linear layer of the blocks: GPT's qkv, proj, fc and
			// proj; Llama's q, k, v, o, gate, up and down.
			if want := map[string]int{"gpt": 8, "llama": 14}[kind]; len(ad.Layers) != want {
				t.Errorf("adapted %d layers %v, want %d", len(ad.Layers), ad.Layers, want)
			}
			// B is zero: the adapters add exact zeros.
			if got := step(t, g, tok, tgt); got != base {
				t.Errorf("step-0 loss with adapters %v, base model %v", got, base)
			}
			if got := logits(t, g, tok); !slices.Equal(got, baseLogits) {
				t.Errorf("logits with zero adapters differ from the base model's by %g", maxRelDiff(got, baseLogits))
			}
		})
	}
}

func TestOnlyAdaptersTrain(t *testing.T) {
	g := newGPT(t)
	tok, tgt := batch(t, g)
	total := nn.Count(g)
	before := map[string][]float32{}
	for _, p := range g.Parameters() {
		before[p.Name()] = p.Float32s()
	}
	ad, err := lora.Apply(g, nil, lora.Config{Rank: 2, Targets: []string{"*.attn.*", "*.mlp.fc"}})
	if err != nil {
		t.Fatal(err)
	}
	// Given every parameter, the optimizer keeps state for the adapters
	// only: the base has no gradients.
	opt, err := optim.New("adam", g.Parameters(), optim.Settings{LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Release()
	// Two blocks, three layers each: qkv [48,16], proj [16,16], fc [64,16].
	wantLayers := []string{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc", "blocks.1.attn.qkv", "blocks.1.attn.proj", "blocks.1.mlp.fc"}
	if !slices.Equal(ad.Layers, wantLayers) {
		t.Fatalf("adapted %v, want %v", ad.Layers, wantLayers)
	}
	perBlock := 2*16 + 48*2 + 2*16 + 16*2 + 2*16 + 64*2 // A [2, In] and B [Out, 2] of each
	if got, want := ad.AdapterBytes(), int64(4*2*perBlock); got != want {
		t.Errorf("adapter bytes %d, want %d", got, want)
	}
	if got := nn.Count(g); got != total+2*perBlock {
		t.Errorf("%d parameters after Apply, want %d + %d", got, total, 2*perBlock)
	}
	if got := len(nn.Trainable(g)); got != len(ad.Adapters) {
		t.Errorf("%d trainable parameters, want the %d adapter matrices", got, len(ad.Adapters))
	}
	mem := g.Tokens.Weight.Device().Memory()
	var losses []float64
	for range 5 {
		losses = append(losses, step(t, g, tok, tgt))
		st := mem.Stats()
		if got := st.Category(memory.Gradient).Current; got != ad.AdapterBytes() {
			t.Errorf("gradients hold %d bytes, want the adapters' %d", got, ad.AdapterBytes())
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
	}
	// Adam: two F32 moments per adapter value, nothing for the base.
	if got, want := mem.Stats().Category(memory.OptimizerState).Current, 2*ad.AdapterBytes(); got != want {
		t.Errorf("optimizer state %d bytes, want %d", got, want)
	}
	if losses[4] >= losses[0] {
		t.Errorf("loss did not fall: %v", losses)
	}
	for _, p := range ad.Base {
		if !slices.Equal(p.Float32s(), before[p.Name()]) {
			t.Errorf("frozen base parameter %s changed", p.Name())
		}
	}
}

func TestMergeComputesWhatAdaptersDo(t *testing.T) {
	for _, kind := range []string{"gpt", "llama"} {
		t.Run(kind, func(t *testing.T) { mergeComputesWhatAdaptersDo(t, kind) })
	}
}

func mergeComputesWhatAdaptersDo(t *testing.T, kind string) {
	dev := cpu.New()
	g := newModel(t, kind, dev)
	tok, tgt := batch(t, g)
	ad, err := lora.Apply(g, nil, lora.Config{Rank: 3, Alpha: 6})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New("adam", ad.Adapters, optim.Settings{LR: 3e-2})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Release()
	orig := map[string][]float32{}
	for _, p := range g.Parameters() {
		orig[p.Name()] = p.Float32s()
	}
	for range 4 {
		step(t, g, tok, tgt)
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
	}
	adapted := logits(t, g, tok)

	// A fresh model loaded with the export computes the same function.
	fresh := newModel(t, kind, dev)
	exp := nn.Export(g)
	// One tensor at a time: beyond the parameters, the export holds one
	// merged [Out, In] weight and the product B·A it sums (4 bytes each
	// per element) or the merged weight and the read's F64 transient (4 +
	// 8): at most 12 bytes per element of the largest weight.
	mem := dev.Memory()
	var largest int64
	for _, p := range g.Parameters() {
		largest = max(largest, int64(p.Len()))
	}
	mem.ResetPeak()
	base := mem.Stats().Requested.Current
	for _, e := range exp {
		if _, err := e.Float32s(); err != nil {
			t.Fatal(err)
		}
	}
	if extra := mem.Stats().Requested.Peak - base; extra > 12*largest {
		t.Errorf("the export peaked %d bytes above the model; one weight's merge needs at most %d", extra, 12*largest)
	}
	if len(exp) != len(fresh.Parameters()) {
		t.Fatalf("export has %d tensors, the bare model %d", len(exp), len(fresh.Parameters()))
	}
	for i, p := range fresh.Parameters() {
		if exp[i].Name != p.Name() || !slices.Equal(exp[i].Shape, p.Shape()) {
			t.Fatalf("export %d is %s %v, want %s %v", i, exp[i].Name, exp[i].Shape, p.Name(), p.Shape())
		}
		v, err := exp[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetFloat32s(v); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxRelDiff(logits(t, fresh, tok), adapted); d > 1e-5 {
		t.Errorf("exported model's logits differ from the adapted model's by %g", d)
	}

	if err := lora.Merge(g); err != nil {
		t.Fatal(err)
	}
	if d := maxRelDiff(logits(t, g, tok), adapted); d > 1e-5 {
		t.Errorf("merged logits differ from adapter logits by %g", d)
	}
	if err := lora.Unmerge(g); err != nil {
		t.Fatal(err)
	}
	if d := maxRelDiff(logits(t, g, tok), adapted); d > 1e-5 {
		t.Errorf("unmerged logits differ from adapter logits by %g", d)
	}
	for _, p := range g.Parameters() {
		if strings.Contains(p.Name(), ".lora_") {
			continue
		}
		a := make([]float64, p.Len())
		for i, v := range p.Float32s() {
			a[i] = float64(v)
		}
		b := make([]float64, p.Len())
		for i, v := range orig[p.Name()] {
			b[i] = float64(v)
		}
		if d := maxRelDiff(a, b); d > 1e-6 {
			t.Errorf("%s after merge and unmerge is %g from the base", p.Name(), d)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  lora.Config
		want string
	}{
		{"no-match", lora.Config{Rank: 2, Targets: []string{"blocks.*.attn.qvk"}}, `pattern "blocks.*.attn.qvk" matches no Linear layer; closest: blocks.0.attn.qkv`},
		{"embedding-is-no-linear", lora.Config{Rank: 2, Targets: []string{"embed.tokens"}}, "matches no Linear layer"},
		{"rank", lora.Config{Rank: 0}, `Rank is 0, want > 0`},
		{"dropout", lora.Config{Rank: 1, Dropout: 1}, "Dropout is 1"},
		{"alpha", lora.Config{Rank: 1, Alpha: math.NaN()}, "Alpha is NaN"},
		// Dim 16: every layer has min(in, out) = 16.
		{"rank above the layer", lora.Config{Rank: 17}, "rank 17 is above the 16 of layer blocks.0.attn.qkv (48×16)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGPT(t)
			n := len(g.Parameters())
			_, err := lora.Apply(g, nil, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if len(g.Parameters()) != n || len(nn.Trainable(g)) != n {
				t.Errorf("a failed Apply changed the model: %d parameters, %d trainable, want %d", len(g.Parameters()), len(nn.Trainable(g)), n)
			}
		})
	}
	t.Run("twice", func(t *testing.T) {
		g := newGPT(t)
		if _, err := lora.Apply(g, nil, lora.Config{Rank: 2, Targets: []string{"*.mlp.fc"}}); err != nil {
			t.Fatal(err)
		}
		n := len(g.Parameters())
		_, err := lora.Apply(g, nil, lora.Config{Rank: 2, Targets: []string{"*.attn.qkv", "*.mlp.fc"}})
		if err == nil || !strings.Contains(err.Error(), "blocks.0.mlp.fc already has an adapter") {
			t.Fatalf("error %v, want one naming the adapted layer", err)
		}
		if len(g.Parameters()) != n {
			t.Errorf("a failed Apply left %d parameters, want %d", len(g.Parameters()), n)
		}
	})
}

// Targets may name layers by their other names, as PEFT's target_modules
// do: a bare name matches every layer whose name ends in it, a glob the
// whole name; memfit's own paths still match as before.
func TestApplyTargetsByAlias(t *testing.T) {
	alias := func(path string) (string, bool) {
		// blocks.N.attn.q -> model.layers.N.self_attn.q_proj, and so on
		r := strings.NewReplacer("blocks.", "model.layers.", ".attn.", ".self_attn.", ".mlp.", ".mlp.")
		return r.Replace(path) + "_proj", true
	}
	for _, c := range []struct {
		targets []string
		want    int // adapted layers of the 2-block llama
	}{
		{[]string{"q_proj", "v_proj"}, 4},
		{[]string{"model.layers.1.*"}, 7},
		{[]string{"*.attn.q", "down_proj"}, 4},
	} {
		m, err := models.NewDecoder(cpu.New(), models.DecoderConfig{Layers: 2, Heads: 2, Dim: 8, Hidden: 16, Context: 8, Vocab: 11, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		ad, err := lora.Apply(m, nil, lora.Config{Rank: 2, Targets: c.targets, Alias: alias})
		if err != nil {
			t.Fatalf("%v: %v", c.targets, err)
		}
		if len(ad.Layers) != c.want {
			t.Errorf("%v adapted %v, want %d layers", c.targets, ad.Layers, c.want)
		}
		nn.Release(m)
	}
	m, _ := models.NewDecoder(cpu.New(), models.DecoderConfig{Layers: 1, Heads: 2, Dim: 8, Hidden: 16, Context: 8, Vocab: 11, Seed: 1})
	defer nn.Release(m)
	if _, err := lora.Apply(m, nil, lora.Config{Rank: 2, Targets: []string{"c_attn"}, Alias: alias}); err == nil || !strings.Contains(err.Error(), "c_attn") {
		t.Errorf("a name no layer has: %v", err)
	}
}

// Adopt takes adapters attached by other means (nn.Linear.AttachLoRA,
// as hf.LoadPEFT attaches a file's) as Apply's: listed in model order,
// training, and everything else frozen with no optimizer state. A model
// without adapters, or with a merged one, is an error.
func TestAdopt(t *testing.T) {
	g := newGPT(t)
	if _, err := lora.Adopt(g, nil); err == nil || !strings.Contains(err.Error(), "no LoRA adapter") {
		t.Errorf("no adapters: %v", err)
	}
	for _, l := range []*nn.Linear{g.Blocks()[1].(*models.GPTBlock).FC, g.Blocks()[0].(*models.GPTBlock).Attn.QKV} {
		if err := l.AttachLoRA(nn.LoRAConfig{Rank: 2}); err != nil {
			t.Fatal(err)
		}
	}
	opt, err := optim.New("adam", g.Parameters(), optim.Settings{LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Release()
	ad, err := lora.Adopt(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"blocks.0.attn.qkv", "blocks.1.mlp.fc"}; !slices.Equal(ad.Layers, want) || len(ad.Adapters) != 4 {
		t.Errorf("adopted %v (%d matrices), want %v", ad.Layers, len(ad.Adapters), want)
	}
	if got := len(nn.Trainable(g)); got != 4 || len(ad.Base) != len(g.Parameters())-4 {
		t.Errorf("%d trainable, %d frozen of %d", got, len(ad.Base), len(g.Parameters()))
	}
	if err := lora.Merge(g); err != nil {
		t.Fatal(err)
	}
	if _, err := lora.Adopt(g, nil); err == nil || !strings.Contains(err.Error(), "blocks.0.attn.qkv is merged") {
		t.Errorf("merged: %v", err)
	}
}
