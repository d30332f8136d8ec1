package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// packed runs a module with the Run's Segments set: rows that pack
// several examples end to end.
type packed struct {
	m   nn.Module
	seg *tensor.Segments
}

func (p packed) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	q := r.In(r.Scope)
	q.Segments = p.seg
	return p.m.Forward(q, x)
}
func (p packed) Parameters() []*tensor.Tensor { return p.m.Parameters() }

// positionsMod applies rotary embeddings at per-token positions.
type positionsMod struct {
	rope      *nn.Rotary
	positions []int32
}

func (m positionsMod) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	return m.rope.ApplyPositions(r, x, m.positions)
}
func (positionsMod) Parameters() []*tensor.Tensor { return nil }

// segPositions are two rows of 7 tokens: examples of 3, 2 and 2 tokens,
// then one continued from a row before (positions from 4) and one of 3.
var segPositions = []int32{0, 1, 2, 0, 1, 0, 1, 4, 5, 6, 7, 0, 1, 2}

func mustSeg(positions []int32, b, t int) *tensor.Segments {
	seg, err := tensor.NewSegments(positions, b, t)
	if err != nil {
		panic(err)
	}
	return seg
}

func init() {
	seg := mustSeg(segPositions, 2, 7)
	layerCases = append(layerCases,
		layerCase{name: "attention/segments", build: func(b *nn.Builder) (nn.Module, error) {
			a, err := nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 4, Heads: 2, Dropout: 0.2, QKV: nn.Normal(0, 0.5), Proj: nn.Normal(0, 0.5)})
			return packed{a, seg}, err
		}, in: []int{2, 7, 4}, want: []int{2, 7, 4}, train: true},
		layerCase{name: "gqa/segments", build: func(b *nn.Builder) (nn.Module, error) {
			a, err := nn.NewGroupedQueryAttention(b, "attn", nn.GQAConfig{Dim: 8, Heads: 4, KVHeads: 2, Dropout: 0.2, Rotary: nn.RotaryConfig{HeadDim: 2, Theta: 100}, Weight: nn.Normal(0, 0.5)})
			return packed{a, seg}, err
		}, in: []int{2, 7, 8}, want: []int{2, 7, 8}, train: true},
		layerCase{name: "rotary/positions", build: func(*nn.Builder) (nn.Module, error) {
			rope, err := nn.NewRotary(nn.RotaryConfig{HeadDim: 6, Theta: 10000})
			return positionsMod{rope, segPositions}, err
		}, in: []int{2, 3, 7, 6}, want: []int{2, 3, 7, 6}},
	)
}

// ApplyPositions gives each row what Apply gives at that row's positions,
// bit for bit: rows whose positions run from different starts, and a row
// of a packed batch cut where its positions restart.
func TestRotaryApplyPositions(t *testing.T) {
	const b, h, tt, d = 2, 3, 7, 8
	rope, err := nn.NewRotary(nn.RotaryConfig{HeadDim: d, Theta: 500000, Scaling: nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 16}})
	if err != nil {
		t.Fatal(err)
	}
	dev := cpu.New()
	x, err := tensor.Rand(dev, tensor.F32, []int{b, h, tt, d}, device.Uniform, -1, 1, 3, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	// Row 0 runs from 5, row 1 holds examples of 3 and 4 tokens.
	positions := []int32{5, 6, 7, 8, 9, 10, 11, 0, 1, 2, 0, 1, 2, 3}
	s := tensor.NewScope(tensor.NoGrad())
	defer s.Close()
	r := nn.Eval(s)
	got := rope.ApplyPositions(r, x, positions).Float32s()
	pieces := []struct{ row, t0, n, pos int }{{0, 0, 7, 5}, {1, 0, 3, 0}, {1, 3, 4, 0}}
	for _, p := range pieces {
		part := s.Narrow(s.Narrow(x, 0, p.row, 1), 2, p.t0, p.n)
		want := rope.Apply(r, part, p.pos).Float32s()
		for hh := range h {
			for i := range p.n {
				for j := range d {
					g := got[((p.row*h+hh)*tt+p.t0+i)*d+j]
					w := want[(hh*p.n+i)*d+j]
					if math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("row %d, head %d, token %d, element %d: %v with positions, %v from Apply at %d", p.row, hh, p.t0+i, j, g, w, p.pos)
					}
				}
			}
		}
	}
	for _, bad := range [][]int32{positions[:13], append([]int32{-1}, positions[1:]...)} {
		err := tensor.Catch(func() error { rope.ApplyPositions(r, x, bad); return nil })
		if err == nil {
			t.Errorf("positions %v: no error", bad)
		}
	}
}

// The attention layers given a packed batch's segments give each example
// what they give it alone, forward and backward: GPT's
// CausalSelfAttention and Llama's GroupedQueryAttention (rotary positions
// restarting with each example).
func TestAttentionLayersPacked(t *testing.T) {
	lengths := [][]int{{3, 2, 2}, {4, 3}} // rows of segPositions; the 4 is continued (positions from 4)
	for _, l := range []struct {
		name  string
		dim   int
		build func(b *nn.Builder) (nn.Module, error)
	}{
		{"attention", 4, func(b *nn.Builder) (nn.Module, error) {
			return nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 4, Heads: 2, QKV: nn.Normal(0, 0.5), Proj: nn.Normal(0, 0.5)})
		}},
		{"gqa", 8, func(b *nn.Builder) (nn.Module, error) {
			return nn.NewGroupedQueryAttention(b, "attn", nn.GQAConfig{Dim: 8, Heads: 4, KVHeads: 2, Rotary: nn.RotaryConfig{HeadDim: 2, Theta: 100}, Weight: nn.Normal(0, 0.5)})
		}},
	} {
		for _, composed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/composed=%v", l.name, composed), func(t *testing.T) {
				var dev device.Device = cpu.New()
				if composed {
					dev = device.Without(dev, device.CapAttention)
				}
				bld := &nn.Builder{Dev: dev, Seed: 3, DType: tensor.F64}
				m, err := l.build(bld)
				if err != nil {
					t.Fatal(err)
				}
				defer nn.Release(m)
				rng := rand.New(rand.NewPCG(1, 2))
				xv := make([]float64, 2*7*l.dim)
				for i := range xv {
					xv[i] = 2*rng.Float64() - 1
				}
				// run returns the output and the input's gradient of
				// Σ out² for x's rows [row, row+nb) and tokens [t0, t0+n),
				// at positions (nil: 0…n-1) whose first is pos.
				run := func(row, nb, t0, n int, positions []int32, pos int) (out, grad []float64) {
					var v []float64
					for r := row; r < row+nb; r++ {
						v = append(v, xv[(r*7+t0)*l.dim:(r*7+t0+n)*l.dim]...)
					}
					x, err := tensor.FromFloat64(dev, v, []int{nb, n, l.dim}, memory.Data)
					if err != nil {
						t.Fatal(err)
					}
					defer x.Release()
					x.SetRequiresGrad(true)
					s := tensor.NewScope()
					r := &nn.Run{Scope: s}
					var y *tensor.Tensor
					switch {
					case positions != nil:
						r.Segments = mustSeg(positions, nb, n)
						y = m.Forward(r, x)
					case pos > 0: // an example continued from a row before: rotated from pos
						g := m.(*nn.GroupedQueryAttention)
						q, k, v := g.Project(r, x, pos)
						y = g.Output(r, r.CausalAttention(q, k, v, 1/math.Sqrt(float64(g.HeadDim())), 0, 0))
					default:
						y = m.Forward(r, x)
					}
					out = y.Float64s()
					s.Sum(s.Mul(y, y), false).Backward()
					s.Close()
					return out, x.Grad().Float64s()
				}
				pOut, pGrad := run(0, 2, 0, 7, segPositions, 0)
				for row, ls := range lengths {
					t0 := 0
					for _, n := range ls {
						pos := int(segPositions[row*7+t0])
						if l.name == "attention" {
							pos = 0 // no positions: only the boundaries matter
						}
						eOut, eGrad := run(row, 1, t0, n, nil, pos)
						o := (row*7 + t0) * l.dim
						for i := range eOut {
							if d := math.Abs(pOut[o+i] - eOut[i]); d > 1e-12 {
								t.Fatalf("row %d, example at %d: output element %d is %v packed, %v alone", row, t0, i, pOut[o+i], eOut[i])
							}
							if d := math.Abs(pGrad[o+i] - eGrad[i]); d > 1e-12 {
								t.Fatalf("row %d, example at %d: gradient element %d is %v packed, %v alone", row, t0, i, pGrad[o+i], eGrad[i])
							}
						}
						t0 += n
					}
				}
			})
		}
	}
}
