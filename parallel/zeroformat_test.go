package parallel_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// format is a model-state format ZeRO must shard without changing a bit
// of the result: an optimizer and the parameters' dtype.
type format struct {
	name   string
	shapes [][]int
	dtype  tensor.DType
	newOpt func([]*tensor.Tensor) (*optim.Optimizer, error)
}

// adafactorShapes mix matrices (factored state), a 3-D tensor (factored
// over its last two dimensions) and vectors, of sizes that leave ranks
// unequal when each owns whole tensors.
var adafactorShapes = [][]int{{50, 40}, {64}, {3, 30, 20}, {40}, {25, 8}, {7}}

var formats = []format{
	{"adafactor", adafactorShapes, tensor.F32, func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
		// A first moment too, so that an element-wise buffer travels
		// with the factored ones.
		return optim.NewAdafactor(ps, optim.Adafactor{LR: 1e-2, Beta1: 0.9, WeightDecay: 0.01})
	}},
	{"adafactor bf16", adafactorShapes, tensor.BF16, func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
		o, err := optim.NewAdafactor(ps, optim.Adafactor{LR: 1e-2})
		if o != nil {
			o.SetStochasticRounding(7)
		}
		return o, err
	}},
	// CPU's Adam kernel computes 16-element vectors in F32 and a chunk's
	// tail in F64, so a shard cut that is not a multiple of 16 from the
	// parameter's start changes the last bit of some moments (the
	// kernel's property, not the sharding's; train's equivalence tests
	// hold Adam to a tolerance). Sizes here are multiples of 64, so shards
	// of 1, 2 and 4 ranks cut at multiples of 16: bitwise.
	{"adam bf16", [][]int{{48, 100}, {64}, {32, 100}, {64}}, tensor.BF16, func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
		o, err := optim.NewAdamW(ps, optim.AdamW{LR: 1e-2, WeightDecay: 0.01})
		if o != nil {
			o.SetStochasticRounding(7)
		}
		return o, err
	}},
	{"adam8bit bf16", shapes8, tensor.BF16, func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
		o, err := newAdamW8(ps)
		if o != nil {
			o.SetStochasticRounding(7)
		}
		return o, err
	}},
}

// runFormat steps fm's parameters over steps [from, to), on c with ZeRO
// (stage) or unsharded (c nil), with gradients that are small multiples of
// 2⁻¹⁰ (exact in bf16, and averaged exactly over identical ranks), and
// returns the full state, the parameters (as float32) and this rank's
// optimizer state bytes.
func runFormat(fm format, c parallel.Comm, stage, from, to int, state *optim.State, params0 [][]float32) (optim.State, [][]float32, int64, error) {
	dev := cpu.New(cpu.Threads(1))
	var ps []*tensor.Tensor
	defer func() {
		for _, p := range ps {
			p.Release()
		}
	}()
	for i, sh := range fm.shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(math.Sin(float64(j*3+i))) * 0.1
		}
		if params0 != nil {
			v = params0[i]
		}
		p, err := tensor.FromFloat32(dev, v, sh, memory.Parameter)
		if err != nil {
			return optim.State{}, nil, 0, err
		}
		ps = append(ps, p)
		if err := p.ConvertTo(fm.dtype); err != nil {
			return optim.State{}, nil, 0, err
		}
		p.SetRequiresGrad(true).SetName(fmt.Sprintf("p%d", i))
	}
	var (
		z   *parallel.ZeRO
		opt *optim.Optimizer
		err error
	)
	if c != nil {
		if z, err = parallel.NewZeRO(c, ps, parallel.ZeROConfig{Stage: stage, BucketBytes: 4096}, fm.newOpt); err != nil {
			return optim.State{}, nil, 0, err
		}
		defer z.Release()
		opt = z.Optimizer()
	} else if opt, err = fm.newOpt(ps); err != nil {
		return optim.State{}, nil, 0, err
	}
	if state != nil {
		if z != nil {
			err = z.ImportFull(*state)
		} else {
			err = opt.Import(*state)
		}
		if err != nil {
			return optim.State{}, nil, 0, err
		}
	}
	for step := from; step < to; step++ {
		for _, p := range ps {
			g := make([]float32, p.Len())
			for j := range g {
				g[j] = float32((j*7+step*13+p.Len())%41-20) / 1024
			}
			gt, err := tensor.FromFloat32(dev, g, p.Shape(), memory.Gradient)
			if err == nil {
				err = gt.ConvertTo(fm.dtype)
			}
			if err != nil {
				return optim.State{}, nil, 0, err
			}
			p.SetGrad(gt)
		}
		if z != nil {
			err = z.Step()
			z.ZeroGrad()
		} else {
			err = opt.Step()
			opt.ZeroGrad()
		}
		if err != nil {
			return optim.State{}, nil, 0, err
		}
	}
	bytes := opt.StateBytes()
	var st optim.State
	if z != nil {
		st, err = z.ExportFull()
	} else {
		st, err = opt.Export()
		opt.Release()
	}
	var out [][]float32
	for _, p := range ps {
		if p.DType() != fm.dtype {
			return optim.State{}, nil, 0, fmt.Errorf("%s is %v after the steps, want %v", p.Name(), p.DType(), fm.dtype)
		}
		out = append(out, p.Float32s())
	}
	return st, out, bytes, err
}

// TestZeROStateFormats is issue 22's composition with ZeRO 1 and 2:
// Adafactor (each rank owns whole tensors) and bf16 parameters with
// stochastic rounding (each piece rounds with its parameter's bits), on 4
// ranks, export exactly the unsharded optimizer's state and parameters;
// resumed from that state on 2 ranks and on 1, they end bitwise where the
// unsharded run ends. The ranks' optimizer state adds up to the unsharded
// optimizer's, byte for byte.
func TestZeROStateFormats(t *testing.T) {
	bits := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
	for _, fm := range formats {
		refMid, refMidParams, refBytes, err := runFormat(fm, nil, 0, 0, 3, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		refEnd, refEndParams, _, err := runFormat(fm, nil, 0, 0, 6, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		same := func(t *testing.T, what string, got, want [][]float32) {
			t.Helper()
			for i := range want {
				if !slices.EqualFunc(got[i], want[i], bits) {
					t.Errorf("%s: tensor %d differs", what, i)
				}
			}
		}
		sameState := func(t *testing.T, what string, got, want optim.State) {
			t.Helper()
			if len(got.Tensors) != len(want.Tensors) || len(want.Tensors) == 0 {
				t.Fatalf("%s: %d state tensors, unsharded %d", what, len(got.Tensors), len(want.Tensors))
			}
			if !maps.Equal(got.ParamSteps, want.ParamSteps) {
				t.Errorf("%s: update counts %v, unsharded %v", what, got.ParamSteps, want.ParamSteps)
			}
			for k, w := range want.Tensors {
				g := got.Tensors[k]
				if !slices.Equal(g.Shape, w.Shape) {
					t.Errorf("%s: %s has shape %v, unsharded %v", what, k, g.Shape, w.Shape)
				}
				same(t, what+" "+k, [][]float32{g.Data}, [][]float32{w.Data})
			}
		}
		for _, stage := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s stage %d", fm.name, stage), func(t *testing.T) {
				mids := make([]optim.State, 4)
				mp := make([][][]float32, 4)
				bytes := make([]int64, 4)
				checkErrs(t, runRanks(parallel.NewLocal(4, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
					var err error
					mids[c.Rank()], mp[c.Rank()], bytes[c.Rank()], err = runFormat(fm, c, stage, 0, 3, nil, nil)
					return err
				}))
				var sum int64
				for r := range mids {
					sameState(t, "4 ranks", mids[r], refMid)
					same(t, "4 ranks params", mp[r], refMidParams)
					sum += bytes[r]
				}
				if sum != refBytes {
					t.Errorf("4 ranks hold %v bytes of optimizer state, %d in all; unsharded %d", bytes, sum, refBytes)
				}
				for _, n := range []int{2, 1} {
					ends := make([][][]float32, n)
					endStates := make([]optim.State, n)
					checkErrs(t, runRanks(parallel.NewLocal(n, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
						var err error
						endStates[c.Rank()], ends[c.Rank()], _, err = runFormat(fm, c, stage, 3, 6, &mids[0], mp[0])
						return err
					}))
					for r := range ends {
						same(t, fmt.Sprintf("resumed on %d ranks", n), ends[r], refEndParams)
						sameState(t, fmt.Sprintf("resumed on %d ranks", n), endStates[r], refEnd)
					}
				}
			})
		}
	}
}

// TestZeROAdafactorOwnsWholeTensors: under Adafactor every rank's shard is
// whole parameters, with their names and shapes (so that a matrix's
// statistics are factored as in one process), the ranks together own each
// parameter once, and a rank's optimizer state is exactly its parameters'
// factored state.
func TestZeROAdafactorOwnsWholeTensors(t *testing.T) {
	for _, n := range []int{2, 3, 4, 8} { // 8: more ranks than tensors
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			owned := make([][]*tensor.Tensor, n)
			bytes := make([]int64, n)
			checkErrs(t, runRanks(parallel.NewLocal(n, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
				dev := cpu.New(cpu.Threads(1))
				var ps []*tensor.Tensor
				defer func() {
					for _, p := range ps {
						p.Release()
					}
				}()
				for i, sh := range adafactorShapes {
					p, err := tensor.New(dev, tensor.F32, sh, memory.Parameter)
					if err != nil {
						return err
					}
					ps = append(ps, p.SetRequiresGrad(true).SetName(fmt.Sprintf("p%d", i)))
					g, err := tensor.New(dev, tensor.F32, sh, memory.Gradient)
					if err != nil {
						return err
					}
					g.Fill(0.5)
					p.SetGrad(g)
				}
				z, err := parallel.NewZeRO(c, ps, parallel.ZeROConfig{Stage: 2}, formats[0].newOpt)
				if err != nil {
					return err
				}
				defer z.Release()
				if err := z.Step(); err != nil {
					return err
				}
				z.ZeroGrad()
				for _, v := range z.Shard() {
					owned[c.Rank()] = append(owned[c.Rank()], v)
				}
				bytes[c.Rank()] = z.Optimizer().StateBytes()
				return nil
			}))
			seen := map[string]int{}
			for r, vs := range owned {
				var want int64
				for _, v := range vs {
					var i int
					if _, err := fmt.Sscanf(v.Name(), "p%d", &i); err != nil || v.Name() != fmt.Sprintf("p%d", i) || i >= len(adafactorShapes) {
						t.Fatalf("rank %d owns %s: not a whole parameter", r, v.Name())
					}
					if !slices.Equal(v.Shape(), adafactorShapes[i]) {
						t.Errorf("rank %d: %s has shape %v, the parameter %v", r, v.Name(), v.Shape(), adafactorShapes[i])
					}
					seen[v.Name()]++
					sh := adafactorShapes[i]
					numel := int64(1)
					for _, d := range sh {
						numel *= int64(d)
					}
					if len(sh) >= 2 {
						lead := numel / int64(sh[len(sh)-1]*sh[len(sh)-2])
						want += 4 * (lead*int64(sh[len(sh)-2]) + lead*int64(sh[len(sh)-1]) + numel) // rows, columns, first moment
					} else {
						want += 4 * 2 * numel // second and first moment
					}
				}
				if bytes[r] != want {
					t.Errorf("rank %d: optimizer state %d bytes, its parameters' Adafactor state is %d", r, bytes[r], want)
				}
			}
			for i := range adafactorShapes {
				if name := fmt.Sprintf("p%d", i); seen[name] != 1 {
					t.Errorf("%s is owned by %d ranks", name, seen[name])
				}
			}
		})
	}
}

// TestZeRO3RefusesWholeAndBF16: stage 3 cuts parameters by element ranges
// in F32 storage; Adafactor and bf16 parameters get an error that says to
// use stage 1 or 2.
func TestZeRO3RefusesWholeAndBF16(t *testing.T) {
	for _, fm := range []format{formats[0], formats[2]} {
		t.Run(fm.name, func(t *testing.T) {
			m, err := models.NewGPT(cpu.New(), gpt3)
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(m)
			for _, p := range m.Parameters() {
				if err := p.ConvertTo(fm.dtype); err != nil {
					t.Fatal(err)
				}
			}
			_, err = parallel.NewZeRO3(parallel.NewLocal(1)[0], m, parallel.ZeRO3Config{}, fm.newOpt)
			if err == nil || !strings.Contains(err.Error(), "-zero 1 or 2") {
				t.Fatalf("error %v, want one naming -zero 1 or 2", err)
			}
		})
	}
}
