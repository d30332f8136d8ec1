package nn_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/internal/goldenfile"
	"github.com/memfit/memfit/nn"
)

func TestSummaryGolden(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 1}
	defer b.Abort()
	must := func(m nn.Module, err error) nn.Module {
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	emb := must(nn.NewEmbedding(b, "embed.tokens", nn.EmbeddingConfig{Num: 256, Dim: 32}))
	conv := must(nn.NewConv2d(b, "stem.conv", nn.Conv2dConfig{In: 3, Out: 8, Kernel: 3, Pad: 1}))
	attn := must(nn.NewCausalSelfAttention(b, "blocks.0.attn", nn.AttentionConfig{Dim: 32, Heads: 4}))
	ln := must(nn.NewLayerNorm(b, "final_norm", 32))
	head := must(nn.NewLinear(b, "head", nn.LinearConfig{In: 32, Out: 10, NoBias: true}))
	m := nn.NewSequential(emb, conv, attn, ln, head)
	nn.Find(m, "embed.tokens.weight").SetRequiresGrad(false) // frozen
	goldenfile.Check(t, "summary.golden", nn.Summary(m))
	if got, want := nn.Count(m), 256*32+8*3*9+8+3*32*32+3*32+32*32+32+2*32+320; got != want {
		t.Errorf("Count %d, want %d", got, want)
	}
	if got, want := nn.ParameterBytes(m), int64(4*nn.Count(m)); got != want {
		t.Errorf("ParameterBytes %d, want %d", got, want)
	}
}
