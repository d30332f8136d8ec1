package report_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A GPT-like model built from tensor ops alone (models/ is not a dependency
// of memory's tests): token and position embeddings, pre-norm blocks of
// causal multi-head attention and a GELU MLP, a final norm and a head.
type gptConfig struct {
	vocab, context, dim, heads, layers int
}

type block struct {
	ln1g, ln1b, qkv, qkvb, proj, projb *tensor.Tensor
	ln2g, ln2b, fc1, fc1b, fc2, fc2b   *tensor.Tensor
}

type gpt struct {
	cfg        gptConfig
	tok, pos   *tensor.Tensor
	blocks     []block
	lnfg, lnfb *tensor.Tensor
	head       *tensor.Tensor
	params     []*tensor.Tensor
}

func newGPT(t testing.TB, dev device.Device, cfg gptConfig) *gpt {
	m := &gpt{cfg: cfg}
	seed := uint64(1)
	param := func(std float64, shape ...int) *tensor.Tensor {
		var p *tensor.Tensor
		var err error
		if std == 0 {
			p, err = tensor.New(dev, tensor.F32, shape, memory.Parameter)
		} else {
			seed++
			p, err = tensor.Rand(dev, tensor.F32, shape, device.Normal, 0, std, seed, memory.Parameter)
		}
		if err != nil {
			t.Fatal(err)
		}
		p.SetRequiresGrad(true)
		m.params = append(m.params, p)
		return p
	}
	ones := func(n int) *tensor.Tensor {
		p, err := tensor.Full(dev, tensor.F32, []int{n}, 1, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		p.SetRequiresGrad(true)
		m.params = append(m.params, p)
		return p
	}
	d := cfg.dim
	m.tok = param(0.02, cfg.vocab, d)
	m.pos = param(0.02, cfg.context, d)
	for range cfg.layers {
		m.blocks = append(m.blocks, block{
			ln1g: ones(d), ln1b: param(0, d),
			qkv: param(0.02, 3*d, d), qkvb: param(0, 3*d),
			proj: param(0.02, d, d), projb: param(0, d),
			ln2g: ones(d), ln2b: param(0, d),
			fc1: param(0.02, 4*d, d), fc1b: param(0, 4*d),
			fc2: param(0.02, d, 4*d), fc2b: param(0, d),
		})
	}
	m.lnfg, m.lnfb = ones(d), param(0, d)
	m.head = param(0.02, cfg.vocab, d)
	return m
}

func (m *gpt) release() {
	for _, p := range m.params {
		p.Release()
	}
}

// loss runs the model on idx [B, T] and returns the mean cross-entropy
// against targets [B, T].
func (m *gpt) loss(s *tensor.Scope, idx, pos, targets *tensor.Tensor) *tensor.Tensor {
	b, tt := idx.Shape()[0], idx.Shape()[1]
	d, h := m.cfg.dim, m.cfg.heads
	x := s.Add(s.Embedding(m.tok, idx), s.Embedding(m.pos, pos))
	for _, blk := range m.blocks {
		a := s.LayerNorm(x, blk.ln1g, blk.ln1b, 1e-5)
		qkv := s.Linear(a, blk.qkv, blk.qkvb)
		parts := s.Split(qkv, 2, d, d, d)
		heads := func(t *tensor.Tensor) *tensor.Tensor {
			return s.Permute(s.Reshape(s.Contiguous(t), b, tt, h, d/h), 0, 2, 1, 3)
		}
		q, k, v := heads(parts[0]), heads(parts[1]), heads(parts[2])
		att := s.MulScalar(s.MatMul(q, s.Transpose(k, 2, 3)), 1/math.Sqrt(float64(d/h)))
		att = s.Softmax(s.CausalMask(att, math.Inf(-1)))
		y := s.Reshape(s.Contiguous(s.Permute(s.MatMul(att, v), 0, 2, 1, 3)), b, tt, d)
		x = s.Add(x, s.Linear(y, blk.proj, blk.projb))
		f := s.Gelu(s.Linear(s.LayerNorm(x, blk.ln2g, blk.ln2b, 1e-5), blk.fc1, blk.fc1b))
		x = s.Add(x, s.Linear(f, blk.fc2, blk.fc2b))
	}
	logits := s.Linear(s.LayerNorm(x, m.lnfg, m.lnfb, 1e-5), m.head, nil)
	return s.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{})
}

// adam keeps Adam's moments as optimizer state and updates in a no-grad
// scope whose results are temporaries.
type adam struct {
	lr   float64
	m, v map[*tensor.Tensor]*tensor.Tensor
	t    int
}

func (o *adam) step(t testing.TB, params []*tensor.Tensor) {
	o.t++
	s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
	defer s.Close()
	const b1, b2, eps = 0.9, 0.999, 1e-8
	for _, p := range params {
		g := p.Grad()
		if g == nil {
			continue
		}
		if o.m[p] == nil {
			m, err1 := tensor.New(p.Device(), tensor.F32, p.Shape(), memory.OptimizerState)
			v, err2 := tensor.New(p.Device(), tensor.F32, p.Shape(), memory.OptimizerState)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			o.m[p], o.v[p] = m, v
		}
		m, v := o.m[p], o.v[p]
		ps := s.With() // this parameter's temporaries go at once
		ps.AddInPlace(ps.MulScalarInPlace(m, b1), ps.MulScalar(g, 1-b1))
		ps.AddInPlace(ps.MulScalarInPlace(v, b2), ps.MulScalar(ps.Square(g), 1-b2))
		lr := o.lr * math.Sqrt(1-math.Pow(b2, float64(o.t))) / (1 - math.Pow(b1, float64(o.t)))
		ps.AddInPlace(p, ps.MulScalar(ps.Div(m, ps.AddScalar(ps.Sqrt(v), eps)), -lr))
		ps.Close()
		p.SetGrad(nil) // set to none: gradients live from backward to the update
	}
}

func (o *adam) release() {
	for _, m := range o.m {
		m.Release()
	}
	for _, v := range o.v {
		v.Release()
	}
}

// trainGPT runs a few steps of a tiny GPT with history and allocation
// sites on, and returns the device's allocator.
func trainGPT(t testing.TB, steps int) *memory.Allocator {
	dev := cpu.New()
	a := dev.Memory()
	a.EnableHistory(1 << 16)
	tensor.EnableAllocSites(a)
	cfg := gptConfig{vocab: 96, context: 32, dim: 64, heads: 4, layers: 2}
	const batch = 8
	m := newGPT(t, dev, cfg)
	t.Cleanup(m.release)
	opt := &adam{lr: 1e-3, m: map[*tensor.Tensor]*tensor.Tensor{}, v: map[*tensor.Tensor]*tensor.Tensor{}}
	t.Cleanup(opt.release)
	posIdx := make([]int32, batch*cfg.context)
	for i := range posIdx {
		posIdx[i] = int32(i % cfg.context)
	}
	pos, err := tensor.FromInt32(dev, posIdx, []int{batch, cfg.context}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pos.Release)
	for step := range steps {
		a.SetStep(int64(step))
		// A new batch each step: tokens of a repeating pattern.
		in := make([]int32, batch*cfg.context)
		out := make([]int32, len(in))
		for i := range in {
			in[i] = int32((i*7 + step*3) % cfg.vocab)
			out[i] = int32((i*7 + step*3 + 7) % cfg.vocab)
		}
		x, err1 := tensor.FromInt32(dev, in, []int{batch, cfg.context}, memory.Data)
		y, err2 := tensor.FromInt32(dev, out, []int{batch, cfg.context}, memory.Data)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		err := tensor.Step(func(s *tensor.Scope) error {
			loss := m.loss(s, x, pos, y)
			loss.Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		x.Release()
		y.Release()
		opt.step(t, m.params)
	}
	a.SetStep(int64(steps))
	return a
}
