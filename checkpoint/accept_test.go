package checkpoint_test

import (
	"math"
	"testing"
	"time"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/train"
)

func TestGPTActivationPeaksByPolicy(t *testing.T) {
	plan := func(ck string) int64 {
		c := train.Default()
		c.Model.Name, c.Model.Layers, c.Model.Heads, c.Model.Width, c.Model.Context, c.Optim.Batch, c.Memory.Checkpoint = "gpt", 12, 6, 384, 256, 8, ck
		p, err := train.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p.Activation
	}
	off, every, sqrt := plan("off"), plan("every"), plan("sqrt")
	t.Logf("12-layer GPT activation peaks: off %d, every %d (%.3f), sqrt %d (%.3f)", off, every, float64(every)/float64(off), sqrt, float64(sqrt)/float64(off))
	if float64(every) > 0.25*float64(off) {
		t.Errorf("Every: %d > 0.25 × %d", every, off)
	}
	if float64(sqrt) > 0.40*float64(off) {
		t.Errorf("Sqrt: %d > 0.40 × %d", sqrt, off)
	}
}

type gptBatch struct {
	tokens, targets *tensor.Tensor
}

func newGPT(t testing.TB, dev device.Device, layers, dim int, dropout float64) (*models.GPT, gptBatch) {
	g, err := models.NewGPT(dev, models.GPTConfig{Layers: layers, Heads: 4, Dim: dim, Context: 16, Vocab: 32, Dropout: dropout, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int32, 4*16)
	tgts := make([]int32, 4*16)
	for i := range toks {
		toks[i] = int32((i * 7) % 32)
		tgts[i] = int32((i*7 + 1) % 32)
	}
	x, _ := tensor.FromInt32(dev, toks, []int{4, 16}, memory.Data)
	y, _ := tensor.FromInt32(dev, tgts, []int{64}, memory.Data)
	return g, gptBatch{x, y}
}

// gptGrads runs one step under policy and returns every gradient's bits.
func gptGrads(t *testing.T, g *models.GPT, b gptBatch, p checkpoint.Policy, opts ...tensor.ScopeOption) [][]uint32 {
	g.SetBlockRunner(p.Runner())
	for _, q := range g.Parameters() {
		q.SetGrad(nil)
	}
	err := tensor.Step(func(s *tensor.Scope) error {
		logits := g.Forward(nn.NewRun(s, 11), b.tokens)
		s.CrossEntropy(s.Reshape(logits, -1, 32), b.targets, tensor.CrossEntropyOptions{}).Backward()
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

func TestGPTGradientsBitwiseUnderEveryPolicy(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []tensor.ScopeOption
	}{{"f32", nil}, {"bf16", []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}}} {
		dev := cpu.New()
		g, b := newGPT(t, dev, 4, 32, 0.1)
		want := gptGrads(t, g, b, checkpoint.Off, mode.opts...)
		for _, p := range []checkpoint.Policy{checkpoint.Every, checkpoint.Sqrt, checkpoint.Segments(2), checkpoint.Budget(1 << 20)} {
			// Budget calibrates over its first calls: check every call.
			for call := 0; call < 3; call++ {
				got := gptGrads(t, g, b, p, mode.opts...)
				for i := range want {
					for j := range want[i] {
						if got[i][j] != want[i][j] {
							t.Fatalf("%s %s call %d: %s[%d] differs", mode.name, p, call, g.Parameters()[i].Name(), j)
						}
					}
				}
				if p.String() != "budget(1048576)" {
					break
				}
			}
		}
	}
}

func TestGPTBudgetFitsAndIsMinimal(t *testing.T) {
	dev := cpu.New()
	g, b := newGPT(t, dev, 6, 64, 0)
	step := func(p checkpoint.Policy) int64 {
		g.SetBlockRunner(p.Runner())
		dev.Memory().ResetPeak()
		if err := tensor.Step(func(s *tensor.Scope) error {
			logits := g.Forward(nn.NewRun(s, 1), b.tokens)
			s.CrossEntropy(s.Reshape(logits, -1, 32), b.targets, tensor.CrossEntropyOptions{}).Backward()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, q := range g.Parameters() {
			q.SetGrad(nil)
		}
		return dev.Memory().Stats().Category(memory.Activation).Peak
	}
	peaks := map[int]int64{}
	for k := 1; k <= 6; k++ {
		peaks[k] = step(checkpoint.Segments(k))
	}
	lo, hi := peaks[1], peaks[1]
	for _, v := range peaks {
		lo, hi = min(lo, v), max(hi, v)
	}
	for _, frac := range []float64{0.25, 0.5, 0.75} {
		budget := lo + int64(frac*float64(hi-lo))
		p := checkpoint.Budget(budget)
		step(p)
		step(p)
		got := step(p)
		k := p.Decided()
		if got > budget {
			t.Errorf("budget %d: %d segments peaked at %d", budget, k, got)
		}
		for j := 1; j < k; j++ {
			if peaks[j] <= budget {
				t.Errorf("budget %d: chose %d segments, but %d (peak %d) fit", budget, k, j, peaks[j])
			}
		}
	}
}

// BenchmarkCheckpointOverhead reports the step time of Every relative to
// Off for a small GPT, measured in one run.
func BenchmarkCheckpointOverhead(b *testing.B) {
	dev := cpu.New()
	g, batch := newGPT(b, dev, 4, 128, 0)
	step := func(p checkpoint.Policy) time.Duration {
		g.SetBlockRunner(p.Runner())
		start := time.Now()
		tensor.Step(func(s *tensor.Scope) error {
			logits := g.Forward(nn.NewRun(s, 1), batch.tokens)
			s.CrossEntropy(s.Reshape(logits, -1, 32), batch.targets, tensor.CrossEntropyOptions{}).Backward()
			return nil
		})
		for _, q := range g.Parameters() {
			q.SetGrad(nil)
		}
		return time.Since(start)
	}
	var off, every time.Duration
	for range b.N {
		off += step(checkpoint.Off)
		every += step(checkpoint.Every)
	}
	b.ReportMetric(float64(every)/float64(off), "every/off")
}
