package freeze_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/freeze"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

type setup struct {
	dev  *cpu.Device
	gpt  *models.GPT
	opt  *optim.Optimizer
	x, y *tensor.Tensor
}

func newSetup(t testing.TB, layers, dim int) *setup {
	dev := cpu.New()
	g, err := models.NewGPT(dev, models.GPTConfig{Layers: layers, Heads: 4, Dim: dim, Context: 16, Vocab: 32, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewAdam(g.Parameters(), optim.Adam{LR: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int32, 8*16)
	for i := range toks {
		toks[i] = int32(i * 5 % 32)
	}
	x, _ := tensor.FromInt32(dev, toks, []int{8, 16}, memory.Data)
	y, _ := tensor.FromInt32(dev, toks, []int{128}, memory.Data)
	return &setup{dev, g, opt, x, y}
}

func (s *setup) step(t testing.TB) {
	err := tensor.Step(func(sc *tensor.Scope) error {
		logits := s.gpt.Forward(nn.NewRun(sc, 1), s.x)
		sc.CrossEntropy(sc.Reshape(logits, -1, 32), s.y, tensor.CrossEntropyOptions{}).Backward()
		return s.opt.Step()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func trainable(m nn.Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		if p.RequiresGrad() {
			n += int64(p.Len())
		}
	}
	return n
}

var frozenPatterns = []string{"embed.*", "blocks.[0-2].*"}

func TestFrozenGPTHoldsOnlyTrainableBytes(t *testing.T) {
	s := newSetup(t, 6, 32)
	frozen, err := freeze.Apply(s.gpt, s.opt, frozenPatterns...)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string][]float32{}
	for _, p := range frozen {
		before[p.Name()] = p.Float32s()
	}
	s.step(t)
	pt := trainable(s.gpt)
	st := s.dev.Memory().Stats()
	if got := st.Category(memory.Gradient).Current; got != 4*pt {
		t.Errorf("gradient bytes %d, want 4·%d", got, pt)
	}
	if got := st.Category(memory.OptimizerState).Current; got != 8*pt {
		t.Errorf("optimizer state bytes %d, want 8·%d", got, pt)
	}
	for range 99 {
		s.opt.ZeroGrad()
		s.step(t)
	}
	for _, p := range frozen {
		for i, v := range p.Float32s() {
			if math.Float32bits(v) != math.Float32bits(before[p.Name()][i]) {
				t.Fatalf("frozen %s changed after 100 steps", p.Name())
			}
		}
	}

	// Gradual unfreezing at step 50 (here: after the 100 steps above).
	sched, err := freeze.NewSchedule(freeze.Stage{Step: 50, Patterns: frozenPatterns, LR: 1e-4})
	if err != nil {
		t.Fatal(err)
	}
	if newly, err := sched.Advance(100, s.gpt, s.opt); err != nil || len(newly) != len(frozen) {
		t.Fatalf("unfreezing: %v, %d parameters", err, len(newly))
	}
	s.opt.ZeroGrad()
	s.step(t)
	all := int64(nn.Count(s.gpt))
	st = s.dev.Memory().Stats()
	if st.Category(memory.Gradient).Current != 4*all || st.Category(memory.OptimizerState).Current != 8*all {
		t.Errorf("after unfreezing: gradient %d, state %d; want 4·%d and 8·%d", st.Category(memory.Gradient).Current, st.Category(memory.OptimizerState).Current, all, all)
	}
}

func TestBackwardStopsAtLowestTrainableLayer(t *testing.T) {
	peak := func(freezeIt bool) int64 {
		s := newSetup(t, 6, 64)
		if freezeIt {
			if _, err := freeze.Apply(s.gpt, s.opt, frozenPatterns...); err != nil {
				t.Fatal(err)
			}
		}
		s.dev.Memory().ResetPeak()
		s.step(t)
		return s.dev.Memory().Stats().Category(memory.Temporary).Allocated // bytes backward allocated
	}
	all, frozen := peak(false), peak(true)
	if float64(frozen) > 0.6*float64(all) {
		t.Errorf("backward allocated %d temporary bytes with blocks 0–2 frozen, %d without: it did not stop early", frozen, all)
	}
}

func TestPatternMatchingNothingOnGPT(t *testing.T) {
	s := newSetup(t, 2, 16)
	_, err := freeze.Apply(s.gpt, s.opt, "block.0.*")
	if err == nil || !strings.Contains(err.Error(), "blocks.0.") {
		t.Errorf("pattern matching nothing: %v", err)
	}
}

// BenchmarkFreeze reports the step time with embeddings and blocks 0–2 of
// a 6-layer GPT frozen relative to the unfrozen step, in one run.
func BenchmarkFreeze(b *testing.B) {
	all := newSetup(b, 6, 128)
	fr := newSetup(b, 6, 128)
	freeze.Apply(fr.gpt, fr.opt, frozenPatterns...)
	var ta, tf time.Duration
	for range b.N {
		start := time.Now()
		all.step(b)
		all.opt.ZeroGrad()
		ta += time.Since(start)
		start = time.Now()
		fr.step(b)
		fr.opt.ZeroGrad()
		tf += time.Since(start)
	}
	b.ReportMetric(float64(tf)/float64(ta), "frozen/unfrozen")
}

func ExampleApply() {
	dev := cpu.New()
	gpt, _ := models.NewGPT(dev, models.GPTConfig{Layers: 4, Heads: 2, Dim: 16, Context: 8, Vocab: 32, Seed: 1})
	frozen, _ := freeze.Apply(gpt, nil, "embed.*", "blocks.[0-1].*")
	fmt.Println(len(frozen), "frozen;", len(nn.Trainable(gpt)), "trainable")
	// Output: 26 frozen; 26 trainable
}
