package accumulate_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/train"
)

type model interface {
	nn.Module
	SetBlockRunner(nn.BlockRunner)
}

type problem struct {
	name    string
	m       model
	x, y    *tensor.Tensor
	tokens  bool
	classes int
}

func lossOf(p problem) func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
	return func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
		logits := p.m.Forward(nn.NewRun(s, 5), mb.Inputs)
		if p.tokens {
			return s.CrossEntropy(s.Reshape(logits, -1, p.classes), s.Reshape(mb.Targets, -1), tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(-1)})
		}
		return s.CrossEntropy(logits, mb.Targets, tensor.CrossEntropyOptions{})
	}
}

// grads runs one window of n micro-batches and returns the gradients.
func grads(t *testing.T, p problem, n int) [][]float64 {
	for _, q := range p.m.Parameters() {
		q.SetGrad(nil)
	}
	var micro []accumulate.Micro
	var err error
	if p.tokens {
		micro, err = accumulate.SplitTokens(p.x, p.y, n, -1)
	} else {
		micro, err = accumulate.Split(p.x, p.y, n)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := accumulate.Window(micro, lossOf(p), nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range micro {
		m.Release()
	}
	var out [][]float64
	for _, q := range p.m.Parameters() {
		out = append(out, q.Grad().Float64s())
	}
	return out
}

func problems(t *testing.T) []problem {
	dev := cpu.New()
	mlp, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{12, 32, 32, 5}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := tensor.Rand(dev, tensor.F32, []int{30, 12}, device.Normal, 0, 1, 4, memory.Data) // 30 rows: 4 micro-batches are uneven
	labels := make([]int32, 30)
	for i := range labels {
		labels[i] = int32(i * 3 % 5)
	}
	ys, _ := tensor.FromInt32(dev, labels, []int{30}, memory.Data)

	gpt, err := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 12, Vocab: 20, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int32, 8*12)
	tgts := make([]int32, 8*12)
	for i := range toks {
		toks[i] = int32(i * 7 % 20)
		tgts[i] = int32(i * 11 % 20)
		if i%12 >= 12-(i/12)%4 { // padding of varying length per row
			tgts[i] = -1
		}
	}
	xt, _ := tensor.FromInt32(dev, toks, []int{8, 12}, memory.Data)
	yt, _ := tensor.FromInt32(dev, tgts, []int{8, 12}, memory.Data)
	return []problem{{"mlp", mlp, xs, ys, false, 5}, {"gpt", gpt, xt, yt, true, 20}}
}

func close(a, b [][]float64) (float64, bool) {
	worst := 0.0
	for i := range a {
		scale := 0.0
		for _, v := range a[i] {
			scale = math.Max(scale, math.Abs(v))
		}
		for j := range a[i] {
			worst = math.Max(worst, math.Abs(a[i][j]-b[i][j])/math.Max(scale, 1e-12))
		}
	}
	return worst, worst <= 1e-5
}

func TestAccumulatedEqualsFullBatch(t *testing.T) {
	for _, p := range problems(t) {
		full := grads(t, p, 1)
		for _, n := range []int{2, 4, 8} {
			got := grads(t, p, n)
			if worst, ok := close(full, got); !ok {
				t.Errorf("%s, %d micro-batches: gradients differ by %.2g relative", p.name, n, worst)
			}
		}
	}
}

func TestAccumulationWithCheckpointing(t *testing.T) {
	for _, p := range problems(t) {
		full := grads(t, p, 1)
		p.m.SetBlockRunner(checkpoint.Every.Runner())
		got := grads(t, p, 4)
		p.m.SetBlockRunner(nil)
		if worst, ok := close(full, got); !ok {
			t.Errorf("%s: accumulation over checkpointed blocks differs by %.2g", p.name, worst)
		}
	}
}

func TestFourMicroBatchesQuarterActivations(t *testing.T) {
	plan := func(accum int) int64 {
		c := train.Default()
		c.Model.Name, c.Model.Layers, c.Model.Heads, c.Model.Width, c.Model.Context, c.Optim.Batch, c.Memory.Accum = "gpt", 6, 6, 384, 256, 16, accum
		p, err := train.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		return p.Activation
	}
	full, four := plan(1), plan(4)
	if float64(four) > 0.30*float64(full) {
		t.Errorf("activation peak with 4 micro-batches %d, full batch %d: %.3f > 0.30", four, full, float64(four)/float64(full))
	}
}

// BenchmarkAccumulation reports GPT throughput with 4 micro-batches
// relative to the full batch, measured in one run, at the reference GPT's
// widths (dim 384, context 256, batch 16; 2 of its 6 layers).
func BenchmarkAccumulation(b *testing.B) {
	dev := cpu.New()
	gpt, _ := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 6, Dim: 384, Context: 256, Vocab: 256, Seed: 1})
	x, _ := tensor.Full(dev, tensor.I32, []int{16, 256}, 3, memory.Data)
	y, _ := tensor.Full(dev, tensor.I32, []int{16, 256}, 5, memory.Data)
	p := problem{m: gpt, x: x, y: y, tokens: true, classes: 256}
	run := func(n int) time.Duration {
		start := time.Now()
		micro, _ := accumulate.SplitTokens(x, y, n, -1)
		accumulate.Window(micro, lossOf(p), nil)
		for _, m := range micro {
			m.Release()
		}
		for _, q := range gpt.Parameters() {
			q.SetGrad(nil)
		}
		return time.Since(start)
	}
	var full, four time.Duration
	for range b.N {
		full += run(1)
		four += run(4)
	}
	b.ReportMetric(float64(full)/float64(four), "throughput_accum4/full")
}

// Four micro-batches of a batch of 30 (8, 7, 8, 7 rows), each weighted by
// its share of the rows, so the accumulated gradient is the full-batch one.
func ExampleWindow() {
	dev := cpu.New()
	x, _ := tensor.Full(dev, tensor.F32, []int{30, 4}, 1, memory.Data)
	y, _ := tensor.Full(dev, tensor.I32, []int{30}, 0, memory.Data)
	micro, _ := accumulate.Split(x, y, 4)
	for _, m := range micro {
		fmt.Printf("%d rows, weight %.4f\n", m.Inputs.Shape()[0], m.Weight)
	}
	// Output:
	// 7 rows, weight 0.2333
	// 8 rows, weight 0.2667
	// 7 rows, weight 0.2333
	// 8 rows, weight 0.2667
}
