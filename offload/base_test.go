package offload_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/tensor"
)

// frozenGPT is a GPT whose blocks' Linear weights are frozen and held in
// dtype (a LoRA base's, without the adapters: the embeddings, norms and
// biases train, so every block's backward runs and reads its weights).
func frozenGPT(t *testing.T, dev device.Device, layers int, dtype tensor.DType) model {
	m := newGPT(t, dev, layers, 0)
	linear := nn.LinearWeights(m.m)
	for _, b := range m.m.Blocks() {
		for _, p := range b.Parameters() {
			if !linear[p] {
				continue
			}
			p.SetRequiresGrad(false)
			if dtype != tensor.F32 {
				if err := p.ConvertTo(dtype); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return m
}

// streamed says which weights a Base streams: the frozen Linear weights.
func streamed(m model) func(*tensor.Tensor) bool {
	linear := nn.LinearWeights(m.m)
	return func(p *tensor.Tensor) bool { return linear[p] && !p.RequiresGrad() }
}

// baseStep is step for a model with frozen weights: one forward and
// backward, the base's pass around it (b nil: none), and the loss and
// the trainable parameters' gradients as bits.
func baseStep(t *testing.T, m model, b *offload.Base, runner nn.BlockRunner, opts ...tensor.ScopeOption) result {
	t.Helper()
	m.m.SetBlockRunner(runner)
	for _, q := range m.m.Parameters() {
		q.SetGrad(nil)
	}
	var res result
	err := tensor.Step(func(s *tensor.Scope) error {
		if b != nil {
			if err := b.BeforeForward(); err != nil {
				return err
			}
		}
		logits := m.m.Forward(nn.NewRun(s, 11), m.in)
		flat := s.Reshape(logits, -1, m.classes)
		l := s.CrossEntropy(flat, m.tgt, tensor.CrossEntropyOptions{})
		flat.Release()
		logits.Release()
		res.loss = math.Float64bits(l.Item())
		l.Backward()
		if b != nil {
			return b.Settle()
		}
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range m.m.Parameters() {
		if q.Grad() == nil {
			continue
		}
		var bits []uint32
		for _, v := range q.Grad().Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		res.grads = append(res.grads, bits)
	}
	return res
}

// TestBaseBitwise: the loss and every gradient bit for bit with the
// frozen weights streamed, in f32, bf16 and nf4, under each checkpoint
// policy, with activations offloaded too, with and without the CPU's
// copying goroutine; over several passes (the first records the trace,
// the next prefetch and keep by it). Between passes the device holds
// none of the streamed weights, the host all of them, and their values
// read where they are.
func TestBaseBitwise(t *testing.T) {
	for _, c := range []struct {
		name  string
		dtype tensor.DType
		opts  []tensor.ScopeOption
	}{
		{"f32", tensor.F32, nil},
		{"bf16", tensor.BF16, []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}},
		{"nf4", tensor.NF4, []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}},
		{"int8 f32", tensor.Int8, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, host := cpu.New(), cpu.New(cpu.Label("host"))
			m := frozenGPT(t, dev, 4, c.dtype)
			defer m.release()
			pols := []checkpoint.Policy{checkpoint.Off, checkpoint.Every, checkpoint.Segments(2)}
			var wants []result
			for _, pol := range pols {
				wants = append(wants, baseStep(t, m, nil, pol.Runner(), c.opts...))
			}
			var values [][]float32
			for _, w := range m.m.Parameters() {
				values = append(values, w.Float32s())
			}
			resident := dev.Memory().Stats().Category(memory.Parameter).Current
			b, err := offload.NewBase(host, m.m.Blocks(), streamed(m))
			if err != nil {
				t.Fatal(err)
			}
			if b.Blocks() != 4 {
				t.Fatalf("%d blocks stream, want 4", b.Blocks())
			}
			resident -= b.Bytes()
			if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != resident {
				t.Fatalf("device parameter bytes %d with the base parked, want %d", got, resident)
			}
			if got := host.Memory().Stats().Category(memory.Parameter).Current; got != b.Bytes() {
				t.Fatalf("host parameter bytes %d, want the base's %d", got, b.Bytes())
			}
			for k, pol := range pols {
				want := wants[k]
				for _, acts := range []bool{false, true} {
					for _, async := range []bool{true, false} {
						restore := offload.SetAsyncPrefetch(async)
						for pass := range 3 {
							runner, opts := pol.Runner(), slices.Clone(c.opts)
							if acts {
								a, _ := offload.NewActivations(host, 1)
								runner, opts = a.Runner(runner), append(opts, tensor.SaveHooks(a))
							}
							dev.Memory().ResetPeak()
							got := baseStep(t, m, b, b.Runner(runner), opts...)
							if !equal(got, want) {
								t.Fatalf("checkpoint %s, activations %v, async %v, pass %d: loss or gradients differ from the run without streaming", pol, acts, async, pass)
							}
							if b.Fetched() != 0 {
								t.Fatalf("%d blocks on the device after the pass", b.Fetched())
							}
							peak := dev.Memory().Stats().Category(memory.Parameter).Peak
							if max := resident + 2*b.MaxBlockBytes(); peak > max {
								t.Errorf("checkpoint %s, pass %d: parameter peak %d, over the resident %d and two blocks (%d)", pol, pass, peak, resident, max)
							}
							if pass > 0 && peak != resident+2*b.MaxBlockBytes() {
								// Prefetching: the next block arrives while
								// one computes.
								t.Errorf("checkpoint %s, pass %d: parameter peak %d, want the resident %d and two blocks", pol, pass, peak, resident)
							}
						}
						restore()
					}
				}
			}
			st := b.Stats()
			if st.Prefetches == 0 || st.Kept == 0 {
				t.Errorf("%+v: want prefetches and kept blocks", st)
			}
			for i, w := range m.m.Parameters() {
				if got := w.Float32s(); !slices.Equal(got, values[i]) {
					t.Errorf("%s: values changed", w.Name())
				}
			}
			if err := b.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBaseTransfers: with checkpointing, a block's recomputation and its
// backward share one fetch, and so do the last block's forward and
// backward: a pass brings each block over twice, less the last's once,
// and prefetches every fetch but the first.
func TestBaseTransfers(t *testing.T) {
	for _, c := range []struct {
		pol     checkpoint.Policy
		fetches int64 // per pass, from the second on, for 4 blocks
	}{
		{checkpoint.Off, 4 + 3},
		{checkpoint.Every, 4 + 3},
		{checkpoint.Segments(2), 4 + 3 + 1}, // blocks 0 and 1 recomputed together: 1 goes home between
	} {
		t.Run(c.pol.String(), func(t *testing.T) {
			dev, host := cpu.New(), cpu.New(cpu.Label("host"))
			m := frozenGPT(t, dev, 4, tensor.BF16)
			defer m.release()
			b, err := offload.NewBase(host, m.m.Blocks(), streamed(m))
			if err != nil {
				t.Fatal(err)
			}
			opts := []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}
			baseStep(t, m, b, b.Runner(c.pol.Runner()), opts...)
			before := b.Stats()
			baseStep(t, m, b, b.Runner(c.pol.Runner()), opts...)
			st := b.Stats()
			if got := st.Fetches - before.Fetches; got != c.fetches {
				t.Errorf("%d fetches in a pass, want %d", got, c.fetches)
			}
			if got := st.Prefetches - before.Prefetches; got != c.fetches {
				t.Errorf("%d prefetches in a pass, want every fetch (%d)", got, c.fetches)
			}
		})
	}
}

// TestBaseEvaluation: a forward without gradients fetches each block in
// turn, the next one ahead, leaves none on the device, and neither
// follows nor changes the training trace.
func TestBaseEvaluation(t *testing.T) {
	dev, host := cpu.New(), cpu.New(cpu.Label("host"))
	m := frozenGPT(t, dev, 3, tensor.NF4)
	defer m.release()
	want := baseStep(t, m, nil, nn.RunSequential)
	b, err := offload.NewBase(host, m.m.Blocks(), streamed(m))
	if err != nil {
		t.Fatal(err)
	}
	m.m.SetBlockRunner(b.Runner(nil))
	eval := func() []float32 {
		var out []float32
		err := tensor.Step(func(s *tensor.Scope) error {
			if err := b.BeforeForward(); err != nil {
				return err
			}
			out = m.m.Forward(nn.Eval(s), m.in).Float32s()
			return b.Settle()
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := eval()
	baseStep(t, m, b, b.Runner(nil))
	if got := baseStep(t, m, b, b.Runner(nil)); !equal(got, want) {
		t.Fatal("training after an evaluation differs")
	}
	before := b.Stats()
	if got := eval(); !slices.Equal(got, first) {
		t.Error("evaluations differ")
	}
	st := b.Stats()
	if st.Fetches-before.Fetches != 3 || st.Prefetches-before.Prefetches != 3 {
		t.Errorf("an evaluation: %d fetches, %d ahead; want 3, all ahead", st.Fetches-before.Fetches, st.Prefetches-before.Prefetches)
	}
	if got := baseStep(t, m, b, b.Runner(nil)); !equal(got, want) {
		t.Fatal("training after an evaluation differs")
	}
	if b.Fetched() != 0 {
		t.Errorf("%d blocks left on the device", b.Fetched())
	}
}

// TestBasePlanIsMeasured: on meta devices a pass allocates what the CPU's
// does, byte for byte, at every moment's peak: the allocations are made
// on the training goroutine in the pass's order, whoever copies.
func TestBasePlanIsMeasured(t *testing.T) {
	peak := func(dev, host device.Device) (int64, int64) {
		m := frozenGPT(t, dev, 4, tensor.NF4)
		defer m.release()
		b, err := offload.NewBase(host, m.m.Blocks(), streamed(m))
		if err != nil {
			t.Fatal(err)
		}
		var p, q int64
		for range 3 {
			dev.Memory().ResetPeak()
			err := tensor.Step(func(s *tensor.Scope) error {
				if err := b.BeforeForward(); err != nil {
					return err
				}
				m.m.SetBlockRunner(b.Runner(checkpoint.Every.Runner()))
				logits := m.m.Forward(nn.NewRun(s, 11), m.in)
				l := s.CrossEntropy(s.Reshape(logits, -1, m.classes), m.tgt, tensor.CrossEntropyOptions{})
				l.Backward()
				return b.Settle()
			}, tensor.Autocast(tensor.BF16))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range m.m.Parameters() {
				q.SetGrad(nil)
			}
			st := dev.Memory().Stats()
			p = max(p, st.Requested.Peak)
			q = max(q, host.Memory().Stats().Requested.Peak)
		}
		return p, q
	}
	cp, ch := peak(device.Without(cpu.New(), device.Lacks("cuda")...), cpu.New(cpu.Label("host")))
	mp, mh := peak(device.Without(meta.New(0), device.Lacks("cuda")...), meta.New(0))
	if cp != mp || ch != mh {
		t.Errorf("device peak %d, host %d on the CPU; %d and %d planned", cp, ch, mp, mh)
	}
}

// TestBaseOutOfMemory: a block that cannot be fetched fails the step
// with an out-of-memory error and leaves nothing behind.
func TestBaseOutOfMemory(t *testing.T) {
	const capacity = 8 << 20
	dev, host := cpu.New(cpu.Capacity(capacity)), cpu.New(cpu.Label("host"))
	m := frozenGPT(t, dev, 2, tensor.F32)
	defer m.release()
	b, err := offload.NewBase(host, m.m.Blocks(), streamed(m))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := tensor.New(dev, tensor.F32, []int{4, 16, 32}, memory.Activation)
	defer x.Release()
	// The rest of the device taken, 16 KiB at a time, but for less than
	// a block.
	var fill []*tensor.Tensor
	defer func() {
		for _, f := range fill {
			f.Release()
		}
	}()
	for {
		f, err := tensor.New(dev, tensor.U8, []int{16 << 10}, memory.Other)
		if err != nil {
			break
		}
		fill = append(fill, f)
	}
	fill[len(fill)-1].Release()
	fill = fill[:len(fill)-1]
	err = tensor.Step(func(s *tensor.Scope) error {
		if err := b.BeforeForward(); err != nil {
			return err
		}
		b.Runner(nil)(nn.NewRun(s, 11), m.m.Blocks(), x)
		return nil
	})
	var oom *memory.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("%v, want an out-of-memory error", err)
	}
	if err := b.Settle(); err != nil {
		t.Fatal(err)
	}
	if b.Fetched() != 0 || b.Stats().Fetches != 0 {
		t.Errorf("%d blocks left on the device, %d fetched", b.Fetched(), b.Stats().Fetches)
	}
}

// TestNewBaseRefuses: a trainable weight does not park.
func TestNewBaseRefuses(t *testing.T) {
	dev, host := cpu.New(), cpu.New(cpu.Label("host"))
	m := newGPT(t, dev, 2, 0)
	defer m.release()
	if _, err := offload.NewBase(host, m.m.Blocks(), func(*tensor.Tensor) bool { return true }); err == nil {
		t.Fatal("trainable weights were streamed")
	}
	for _, p := range m.m.Parameters() {
		if p.Parked() && !p.Fetched() {
			t.Errorf("%s left on the host", p.Name())
		}
	}
}
