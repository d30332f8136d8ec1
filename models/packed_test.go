package models_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// packedModel is a model that takes packed rows, built on a device.
type packedModel struct {
	name  string
	build func(dev device.Device, dt tensor.DType) (interface {
		nn.Model
		models.Packed
	}, error)
}

var packedModels = []packedModel{
	{"gpt", func(dev device.Device, dt tensor.DType) (interface {
		nn.Model
		models.Packed
	}, error) {
		return models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 4, Dim: 32, Context: 64, Vocab: 40, Seed: 3, DType: dt})
	}},
	{"llama", func(dev device.Device, dt tensor.DType) (interface {
		nn.Model
		models.Packed
	}, error) {
		return models.NewDecoder(dev, models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 32, Context: 64, Vocab: 40, Seed: 3, DType: dt})
	}},
}

const ignored = -100

// example is one training example: its tokens and their targets (the
// next token, or ignored on prompt tokens and on the last one).
type example struct{ tokens, targets []int32 }

// examples are five of different lengths, some with a prompt that is
// not trained on.
func examples() []example {
	rng := rand.New(rand.NewPCG(8, 9))
	var out []example
	for i, n := range []int{17, 23, 8, 31, 12} {
		e := example{tokens: make([]int32, n), targets: make([]int32, n)}
		for j := range n {
			e.tokens[j] = int32(1 + rng.IntN(39))
		}
		for j := range n {
			e.targets[j] = ignored
			if j+1 < n && j >= i { // example i's first i tokens are its prompt
				e.targets[j] = e.tokens[j+1]
			}
		}
		out = append(out, e)
	}
	return out
}

// packedBatch packs exs into rows of t tokens (each example whole, in
// order, rows filled up and then padded by an example of token 0 whose
// targets are ignored) and returns tokens, targets and positions, row by
// row.
func packedBatch(exs []example, t int) (tokens, targets, positions []int32, rows int) {
	row := 0
	flush := func() {
		if pad := t - row; pad > 0 {
			for j := range pad {
				tokens, targets, positions = append(tokens, 0), append(targets, ignored), append(positions, int32(j))
			}
		}
		rows++
		row = 0
	}
	for _, e := range exs {
		if row+len(e.tokens) > t {
			flush()
		}
		tokens, targets = append(tokens, e.tokens...), append(targets, e.targets...)
		for j := range e.tokens {
			positions = append(positions, int32(j))
		}
		row += len(e.tokens)
	}
	flush()
	return tokens, targets, positions, rows
}

// paddedBatch puts each example in a row of its own, padded to the
// longest with token 0 and ignored targets.
func paddedBatch(exs []example) (tokens, targets []int32, rows, t int) {
	for _, e := range exs {
		t = max(t, len(e.tokens))
	}
	for _, e := range exs {
		tokens, targets = append(tokens, e.tokens...), append(targets, e.targets...)
		for range t - len(e.tokens) {
			tokens, targets = append(tokens, 0), append(targets, ignored)
		}
	}
	return tokens, targets, len(exs), t
}

// packedStep runs one training step of m on tokens and targets [rows, t]
// at positions (nil: unpacked) and returns the loss and the parameters'
// gradients, which it clears.
func packedStep(t *testing.T, m interface {
	nn.Model
	models.Packed
}, tokens, targets, positions []int32, rows, tt int, autocast tensor.DType) (float64, [][]float64) {
	t.Helper()
	dev := m.Parameters()[0].Device()
	x, err := tensor.FromInt32(dev, tokens, []int{rows, tt}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	y, err := tensor.FromInt32(dev, targets, []int{rows, tt}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Release()
	var opts []tensor.ScopeOption
	if autocast != 0 {
		opts = append(opts, tensor.Autocast(autocast))
	}
	var loss float64
	err = tensor.Step(func(s *tensor.Scope) error {
		l := m.TokenLossPacked(nn.NewRun(s, 1), x, y, positions, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(ignored)})
		l.Backward()
		loss = l.Item()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var grads [][]float64
	for _, p := range m.Parameters() {
		grads = append(grads, p.Grad().Float64s())
		p.SetGrad(nil)
	}
	return loss, grads
}

// The loss and gradients of a packed step are those of the same examples
// unpacked, one per row and padded: for GPT (learned positions) and Llama
// (rotary positions, grouped-query attention), in F64, F32 and under bf16
// autocast, through the fused attention kernels and the composed path,
// with every block checkpointed or none.
func TestPackedStepEqualsUnpacked(t *testing.T) {
	exs := examples()
	pTok, pTgt, pPos, pRows := packedBatch(exs, 48)
	uTok, uTgt, uRows, uT := paddedBatch(exs)
	if pRows != 2 {
		t.Fatalf("the examples pack into %d rows, want 2", pRows)
	}
	for _, pm := range packedModels {
		for _, tc := range []struct {
			name     string
			dt       tensor.DType
			autocast tensor.DType
			lossTol  float64
			gradTol  float64
		}{
			// Each row's values are those of the example alone (its
			// products and softmax see the same elements); only the
			// sums over rows into the weights' gradients run in another
			// order (measured: 1.1e-6 at most in f32 and under bf16
			// autocast, whose gradients accumulate in f32).
			{"f64", tensor.F64, 0, 1e-12, 1e-10},
			{"f32", tensor.F32, 0, 1e-6, 2e-5},
			{"f32/autocast-bf16", tensor.F32, tensor.BF16, 1e-4, 1e-3},
		} {
			for _, composed := range []bool{false, true} {
				for _, ckpt := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/composed=%v/checkpoint=%v", pm.name, tc.name, composed, ckpt), func(t *testing.T) {
						var dev device.Device = cpu.New()
						if composed {
							dev = device.Without(dev, device.CapAttention)
						}
						m, err := pm.build(dev, tc.dt)
						if err != nil {
							t.Fatal(err)
						}
						defer nn.Release(m)
						if ckpt {
							m.SetBlockRunner(checkpoint.Every.Runner())
						}
						pLoss, pGrads := packedStep(t, m, pTok, pTgt, pPos, pRows, 48, tc.autocast)
						uLoss, uGrads := packedStep(t, m, uTok, uTgt, nil, uRows, uT, tc.autocast)
						if math.IsNaN(pLoss) || math.Abs(pLoss-uLoss) > tc.lossTol*math.Abs(uLoss) {
							t.Errorf("packed loss %.9g, unpacked %.9g", pLoss, uLoss)
						}
						for i, p := range m.Parameters() {
							if e := relErr(pGrads[i], uGrads[i]); e > tc.gradTol {
								t.Errorf("%s: packed gradient off by %.3g relative (tolerance %g)", p.Name(), e, tc.gradTol)
							}
						}
					})
				}
			}
		}
	}
}

// relErr is the largest |got-want| relative to max(|want|, rms(want)).
func relErr(got, want []float64) float64 {
	var rms float64
	for _, v := range want {
		rms += v * v
	}
	rms = math.Sqrt(rms / float64(max(len(want), 1)))
	var worst float64
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > 0 {
			worst = max(worst, d/math.Max(math.Abs(want[i]), rms))
		}
	}
	return worst
}

// Without positions the packed methods are Forward and TokenLoss bit for
// bit, and positions 0…T-1 in every row give the same values.
func TestPackedNilPositions(t *testing.T) {
	for _, pm := range packedModels {
		t.Run(pm.name, func(t *testing.T) {
			m, err := pm.build(cpu.New(), tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			uTok, uTgt, rows, tt := paddedBatch(examples())
			var pos []int32
			for range rows {
				for j := range tt {
					pos = append(pos, int32(j))
				}
			}
			l0, g0 := packedStep(t, m, uTok, uTgt, nil, rows, tt, 0)
			dev := m.Parameters()[0].Device()
			x, _ := tensor.FromInt32(dev, uTok, []int{rows, tt}, memory.Data)
			defer x.Release()
			y, _ := tensor.FromInt32(dev, uTgt, []int{rows, tt}, memory.Data)
			defer y.Release()
			var l1 float64
			err = tensor.Step(func(s *tensor.Scope) error {
				l := m.(interface {
					TokenLoss(*nn.Run, *tensor.Tensor, *tensor.Tensor, tensor.CrossEntropyOptions) *tensor.Tensor
				}).TokenLoss(nn.NewRun(s, 1), x, y, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(ignored)})
				l.Backward()
				l1 = l.Item()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range m.Parameters() {
				if !slices.Equal(p.Grad().Float64s(), g0[i]) {
					t.Errorf("%s: TokenLossPacked(nil) and TokenLoss differ", p.Name())
				}
				p.SetGrad(nil)
			}
			if l1 != l0 {
				t.Errorf("loss %v through TokenLossPacked(nil), %v through TokenLoss", l0, l1)
			}
			l2, g2 := packedStep(t, m, uTok, uTgt, pos, rows, tt, 0)
			if math.Abs(l2-l0) > 1e-6*math.Abs(l0) {
				t.Errorf("loss %v at positions 0…T-1, %v without positions", l2, l0)
			}
			for i, p := range m.Parameters() {
				if e := relErr(g2[i], g0[i]); e > 1e-5 {
					t.Errorf("%s: gradient at positions 0…T-1 off by %.3g", p.Name(), e)
				}
			}
		})
	}
}

// A packed step traced on the meta device allocates what it allocates on
// the CPU, category by category, with the fused kernels and with the
// composed path, checkpointed or not: plans of packed runs stay exact.
func TestPackedMetaMatchesCPU(t *testing.T) {
	pTok, pTgt, pPos, rows := packedBatch(examples(), 48)
	for _, pm := range packedModels {
		for _, composed := range []bool{false, true} {
			for _, autocast := range []tensor.DType{0, tensor.BF16} {
				t.Run(fmt.Sprintf("%s/composed=%v/autocast=%v", pm.name, composed, autocast), func(t *testing.T) {
					var got [2][memory.NumCategories]memory.Stat
					for i, dev := range []device.Device{cpu.New(), device.Without(meta.New(0), device.Lacks("cpu")...)} {
						if composed {
							dev = device.Without(dev, device.CapAttention)
						}
						m, err := pm.build(dev, tensor.F32)
						if err != nil {
							t.Fatal(err)
						}
						m.SetBlockRunner(checkpoint.Every.Runner())
						packedStep(t, m, pTok, pTgt, pPos, rows, 48, autocast)
						got[i] = categories(dev)
						nn.Release(m)
					}
					for cat := range memory.NumCategories {
						if got[0][cat].Peak != got[1][cat].Peak || got[0][cat].Current != got[1][cat].Current {
							t.Errorf("%v: cpu %+v, meta %+v", cat, got[0][cat], got[1][cat])
						}
					}
				})
			}
		}
	}
}

// Positions that do not fit the tokens are errors naming the model.
func TestPackedBadPositions(t *testing.T) {
	for _, pm := range packedModels {
		m, err := pm.build(cpu.New(), tensor.F32)
		if err != nil {
			t.Fatal(err)
		}
		dev := m.Parameters()[0].Device()
		x, _ := tensor.FromInt32(dev, make([]int32, 8), []int{2, 4}, memory.Data)
		cases := []struct {
			pos  []int32
			want string
		}{
			{[]int32{0, 1, 2}, "3 positions for a batch of 2 rows of 4 tokens"},
			{[]int32{0, 1, 0, -1, 0, 1, 2, 3}, "position 3 of row 0 is -1"},
		}
		if pm.name == "gpt" {
			cases = append(cases, struct {
				pos  []int32
				want string
			}{[]int32{0, 1, 2, 3, 62, 63, 64, 65}, "position 65 is past the context of 64"})
		}
		for _, c := range cases {
			err := tensor.Step(func(s *tensor.Scope) error {
				m.ForwardPacked(nn.Eval(s), x, c.pos)
				return nil
			})
			var te *tensor.Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), pm.name) {
				t.Errorf("%s, positions %v: %v, want an error naming %s and saying %q", pm.name, c.pos, err, pm.name, c.want)
			}
		}
		x.Release()
		nn.Release(m)
		if n := dev.Memory().Stats().Requested.Current; n != 0 {
			t.Errorf("%s: %d bytes left allocated after the errors", pm.name, n)
		}
	}
}

// Two examples of 3 and 2 tokens packed into one row, at positions that
// restart with the second, give the loss of the two as rows of their own
// (the shorter padded, its padding's target ignored).
func ExamplePacked() {
	gpt, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 1, Heads: 2, Dim: 8, Context: 8, Vocab: 10, Seed: 1})
	if err != nil {
		panic(err)
	}
	defer nn.Release(gpt)
	loss := func(tokens, targets, positions []int32, rows int) (l float64) {
		shape := []int{rows, len(tokens) / rows}
		x, _ := tensor.FromInt32(gpt.Tokens.Weight.Device(), tokens, shape, memory.Data)
		defer x.Release()
		y, _ := tensor.FromInt32(gpt.Tokens.Weight.Device(), targets, shape, memory.Data)
		defer y.Release()
		err := tensor.Step(func(s *tensor.Scope) error {
			l = gpt.TokenLossPacked(nn.Eval(s), x, y, positions, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(-100)}).Item()
			return nil
		})
		if err != nil {
			panic(err)
		}
		return l
	}
	packed := loss([]int32{1, 2, 3, 4, 5}, []int32{2, 3, -100, 5, -100}, []int32{0, 1, 2, 0, 1}, 1)
	unpacked := loss([]int32{1, 2, 3, 4, 5, 0}, []int32{2, 3, -100, 5, -100, -100}, nil, 2)
	fmt.Printf("packed %.5f, unpacked %.5f\n", packed, unpacked)
	// Output: packed 2.29450, unpacked 2.29450
}
