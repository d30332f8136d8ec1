package checkpoint_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// tokenLossGrads is gptGrads through GPT.TokenLoss (the chunked head).
func tokenLossGrads(t *testing.T, g *models.GPT, b gptBatch, p checkpoint.Policy, opts ...tensor.ScopeOption) [][]uint32 {
	t.Helper()
	g.SetBlockRunner(p.Runner())
	for _, q := range g.Parameters() {
		q.SetGrad(nil)
	}
	err := tensor.Step(func(s *tensor.Scope) error {
		g.TokenLoss(nn.NewRun(s, 11), b.tokens, b.targets, tensor.CrossEntropyOptions{}).Backward()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]uint32
	for _, q := range g.Parameters() {
		var bits []uint32
		for _, v := range q.Grad().Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		out = append(out, bits)
	}
	return out
}

// With the chunked head, checkpointing still recomputes exactly what the
// first pass computed (gradients bitwise equal under every policy), and
// the gradients are those of Forward and CrossEntropy within the
// dtype's tolerance.
func TestGPTTokenLossBitwiseUnderEveryPolicy(t *testing.T) {
	for _, mode := range []struct {
		name string
		tol  float64
		opts []tensor.ScopeOption
	}{{"f32", 1e-5, nil}, {"bf16", 5e-3, []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}}} {
		t.Run(mode.name, func(t *testing.T) {
			dev := cpu.New()
			ref, b := newGPT(t, dev, 4, 32, 0.1)
			// 64 tokens in chunks of 24: three uneven chunks.
			c := ref.Config
			c.HeadChunkRows = 24
			g, err := models.NewGPT(dev, c)
			if err != nil {
				t.Fatal(err)
			}
			want := tokenLossGrads(t, g, b, checkpoint.Off, mode.opts...)
			for _, p := range []checkpoint.Policy{checkpoint.Every, checkpoint.Sqrt, checkpoint.Segments(2)} {
				got := tokenLossGrads(t, g, b, p, mode.opts...)
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("%s: %s[%d] differs", p, g.Parameters()[i].Name(), j)
						}
					}
				}
			}
			full := gptGrads(t, ref, b, checkpoint.Off, mode.opts...)
			for i := range full {
				var num, den float64
				for j := range full[i] {
					a, w := float64(math.Float32frombits(want[i][j])), float64(math.Float32frombits(full[i][j]))
					num += (a - w) * (a - w)
					den += w * w
				}
				if den > 0 && math.Sqrt(num/den) > mode.tol {
					t.Errorf("%s: chunked head's gradient differs from Forward+CrossEntropy's by %.2g (relative) > %.2g", g.Parameters()[i].Name(), math.Sqrt(num/den), mode.tol)
				}
			}
		})
	}
}
