package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// wholeCopy is Adafactor without its own rounded update (no
// roundingRule): a BF16 matrix is then updated on a whole F32 copy of it
// and of its gradient, the reference the chunked update must equal.
type wholeCopy struct{ r adafactorRule }

func (w wholeCopy) name() string                     { return w.r.name() }
func (w wholeCopy) buffers() []string                { return w.r.buffers() }
func (w wholeCopy) specs(p *tensor.Tensor) []bufSpec { return w.r.specs(p) }
func (w wholeCopy) elementsPer(buffer string) int    { return w.r.elementsPer(buffer) }
func (w wholeCopy) shardAlignment() int              { return w.r.shardAlignment() }
func (w wholeCopy) update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	w.r.update(s, p, g, bufs, h)
}

// Adafactor updates BF16 weights chunk by chunk, widening what it reads
// and rounding what it writes: the parameter, its state and its bits are
// those of the update on whole F32 copies, over steps, with and without a
// first moment, weight decay and a gradient scale, for a matrix and a
// stack of them, and the update's temporaries hold a chunk of rows, not
// the F32 copies.
func TestAdafactorRoundedChunksEqualCopy(t *testing.T) {
	defer SetChunkElems(512)() // 7 rows of 70 a chunk: many chunks
	for _, shape := range [][]int{{40, 70}, {2, 40, 70}} {
		for _, beta1 := range []float64{0, 0.9} {
			t.Run(fmt.Sprintf("%v/beta1=%v", shape, beta1), func(t *testing.T) {
				run := func(whole bool) (p []float64, state map[string][]float32, peak int64) {
					dev := cpu.New()
					rng := rand.New(rand.NewPCG(1, 2))
					n := 1
					for _, d := range shape {
						n *= d
					}
					vals := make([]float32, n)
					for i := range vals {
						vals[i] = float32(rng.NormFloat64())
					}
					w, err := tensor.New(dev, tensor.BF16, shape, memory.Parameter)
					if err != nil {
						t.Fatal(err)
					}
					defer w.Release()
					if err := w.SetFloat32s(vals); err != nil {
						t.Fatal(err)
					}
					w.SetName("w").SetRequiresGrad(true)
					o, err := NewAdafactor([]*tensor.Tensor{w}, Adafactor{LR: 1e-2, Beta1: beta1, WeightDecay: 0.1})
					if err != nil {
						t.Fatal(err)
					}
					defer o.Release()
					o.SetStochasticRounding(7)
					if whole {
						o.rule = wholeCopy{o.rule.(adafactorRule)}
					}
					for range 3 {
						for i := range vals {
							vals[i] = float32(rng.NormFloat64() * 1e-2)
						}
						g, err := tensor.New(dev, tensor.BF16, shape, memory.Gradient)
						if err != nil {
							t.Fatal(err)
						}
						if err := g.SetFloat32s(vals); err != nil {
							t.Fatal(err)
						}
						w.SetGrad(g)
						base := dev.Memory().Stats().Requested.Current
						dev.Memory().ResetPeak()
						if err := o.StepScaled(0.5); err != nil {
							t.Fatal(err)
						}
						peak = max(peak, dev.Memory().Stats().Requested.Peak-base)
						o.ZeroGrad()
					}
					st, err := o.Export()
					if err != nil {
						t.Fatal(err)
					}
					state = map[string][]float32{}
					for k, v := range st.Tensors {
						state[k] = v.Data
					}
					return w.Float64s(), state, peak
				}
				got, gotState, gotPeak := run(false)
				want, wantState, wantPeak := run(true)
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("element %d is %v, want the whole copy's %v", i, got[i], want[i])
					}
				}
				for k, w := range wantState {
					if !slices.Equal(gotState[k], w) {
						t.Errorf("state %s differs from the whole copy's", k)
					}
				}
				// The copies are two [.., 40, 70] F32 tensors of the
				// parameter's elements; a chunk is 7 rows.
				copies := int64(2 * 4 * len(want))
				if gotPeak > wantPeak-copies/2 {
					t.Errorf("the update's peak is %d bytes, the whole copy's %d: not below by the copies (%d)", gotPeak, wantPeak, copies)
				}
				t.Logf("update peak %d bytes, %d with the copies", gotPeak, wantPeak)
			})
		}
	}
}
