package offload_test

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/tensor"
)

// model is what the tests train: a GPT or an MLP with its batch.
type model struct {
	m       nn.Model
	in, tgt *tensor.Tensor
	classes int // logits per row
}

func newGPT(t testing.TB, dev device.Device, layers int, dropout float64) model {
	g, err := models.NewGPT(dev, models.GPTConfig{Layers: layers, Heads: 4, Dim: 32, Context: 16, Vocab: 32, Dropout: dropout, Seed: 3})
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
	return model{g, x, y, 32}
}

func newMLP(t testing.TB, dev device.Device, layers int, dropout float64) model {
	widths := []int{20}
	for range layers {
		widths = append(widths, 48)
	}
	widths = append(widths, 10)
	m, err := models.NewMLP(dev, models.MLPConfig{Widths: widths, Dropout: dropout, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	xs := make([]float32, 8*20)
	for i := range xs {
		xs[i] = float32(math.Sin(float64(i)))
	}
	ys := make([]int32, 8)
	for i := range ys {
		ys[i] = int32(i % 10)
	}
	x, _ := tensor.FromFloat32(dev, xs, []int{8, 20}, memory.Data)
	y, _ := tensor.FromInt32(dev, ys, []int{8}, memory.Data)
	return model{m, x, y, 10}
}

func (m model) release() {
	for _, p := range m.m.Parameters() {
		p.Release()
	}
	m.in.Release()
	m.tgt.Release()
}

// result is a step's loss and every gradient, as bits.
type result struct {
	loss  uint64
	grads [][]uint32
}

// step runs one forward and backward with the given block runner and
// scope options and returns the loss and gradients' bits.
func step(t *testing.T, m model, runner nn.BlockRunner, opts ...tensor.ScopeOption) result {
	t.Helper()
	m.m.(interface{ SetBlockRunner(nn.BlockRunner) }).SetBlockRunner(runner)
	for _, q := range m.m.Parameters() {
		q.SetGrad(nil)
	}
	var res result
	err := tensor.Step(func(s *tensor.Scope) error {
		logits := m.m.Forward(nn.NewRun(s, 11), m.in)
		flat := s.Reshape(logits, -1, m.classes)
		l := s.CrossEntropy(flat, m.tgt, tensor.CrossEntropyOptions{})
		flat.Release() // as train's loss does: only the loss lives on into backward
		logits.Release()
		res.loss = math.Float64bits(l.Item())
		l.Backward()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range m.m.Parameters() {
		var bits []uint32
		for _, v := range q.Grad().Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		res.grads = append(res.grads, bits)
	}
	return res
}

func equal(a, b result) bool {
	if a.loss != b.loss || len(a.grads) != len(b.grads) {
		return false
	}
	for i := range a.grads {
		if !slices.Equal(a.grads[i], b.grads[i]) {
			return false
		}
	}
	return true
}

var builders = []struct {
	name string
	make func(testing.TB, device.Device, int, float64) model
}{{"gpt", newGPT}, {"mlp", newMLP}}

// TestActivationsBitwise: the same loss and gradients bit for bit with
// activations offloaded, under each checkpoint policy, in f32 and bf16,
// each prefetch window; nothing left on either allocator afterwards.
func TestActivationsBitwise(t *testing.T) {
	for _, b := range builders {
		for _, mode := range []struct {
			name string
			opts []tensor.ScopeOption
		}{{"f32", nil}, {"bf16", []tensor.ScopeOption{tensor.Autocast(tensor.BF16)}}} {
			t.Run(b.name+"/"+mode.name, func(t *testing.T) {
				dev, host := cpu.New(), cpu.New()
				m := b.make(t, dev, 4, 0.1)
				defer m.release()
				for _, pol := range []checkpoint.Policy{checkpoint.Off, checkpoint.Every, checkpoint.Segments(2), checkpoint.Nested(2)} {
					want := step(t, m, pol.Runner(), mode.opts...)
					for _, window := range []int{0, 1, 3} {
						a, err := offload.NewActivations(host, window)
						if err != nil {
							t.Fatal(err)
						}
						got := step(t, m, a.Runner(pol.Runner()), append(slices.Clone(mode.opts), tensor.SaveHooks(a))...)
						if !equal(got, want) {
							t.Fatalf("checkpoint %s, window %d: loss or gradients differ from the run without offload", pol, window)
						}
						if a.Stats().Packed == 0 || a.Stats().Restored != a.Stats().Packed {
							t.Errorf("checkpoint %s, window %d: %+v: want every packed storage restored once", pol, window, a.Stats())
						}
						if a.Live() != 0 {
							t.Errorf("checkpoint %s, window %d: %d storages still held", pol, window, a.Live())
						}
						if n := host.Memory().Stats().Allocated.Current; n != 0 {
							t.Errorf("checkpoint %s, window %d: %d bytes left on the host", pol, window, n)
						}
						if n := dev.Memory().Stats().Category(memory.Activation).Current; n != 0 {
							t.Errorf("checkpoint %s, window %d: %d activation bytes left on the device", pol, window, n)
						}
					}
				}
			})
		}
	}
}

// peaks runs one step and returns the device's and the host's activation
// peaks.
func peaks(t *testing.T, m model, dev, host device.Device, runner nn.BlockRunner, opts ...tensor.ScopeOption) (devPeak, hostPeak int64) {
	dev.Memory().ResetPeak()
	host.Memory().ResetPeak()
	step(t, m, runner, opts...)
	return dev.Memory().Stats().Category(memory.Activation).Peak, host.Memory().Stats().Category(memory.Activation).Peak
}

// TestActivationsPeak: the device's activation peak with offload does not
// grow with depth and is at most one block's activations per prefetched
// block above the peak without prefetch; the bytes the device no longer
// holds are on the host, counted as activations there.
func TestActivationsPeak(t *testing.T) {
	for _, b := range builders {
		t.Run(b.name, func(t *testing.T) {
			plain := map[int]int64{}
			off := map[int]int64{}
			for _, layers := range []int{4, 8} {
				dev, host := cpu.New(), cpu.New()
				m := b.make(t, dev, layers, 0)
				plain[layers], _ = peaks(t, m, dev, host, nn.RunSequential)
				for _, window := range []int{0, 1, 2} {
					a, _ := offload.NewActivations(host, window)
					d, h := peaks(t, m, dev, host, a.Runner(nil), tensor.SaveHooks(a))
					if window == 0 {
						off[layers] = d
					}
					// Forward holds one block's working set whatever the
					// window; backward the group it differentiates and
					// the window's groups, plus the loss (4 bytes).
					if bound := max(off[layers], int64(1+window)*a.Stats().MaxGroupB+4); d > bound {
						t.Errorf("%d layers, window %d: device peak %d > %d (no-prefetch peak %d, largest group %d)", layers, window, d, bound, off[layers], a.Stats().MaxGroupB)
					}
					if h == 0 || h != a.Stats().PackedB {
						t.Errorf("%d layers, window %d: host activation peak %d, packed %d bytes", layers, window, h, a.Stats().PackedB)
					}
					t.Logf("%d layers, window %d: device activation peak %d (%d without offload), host %d, largest group %d", layers, window, d, plain[layers], h, a.Stats().MaxGroupB)
				}
				m.release()
			}
			if off[8] != off[4] {
				t.Errorf("device activation peak with offload grows with depth: %d at 4 layers, %d at 8", off[4], off[8])
			}
			if off[8] >= plain[8]/2 {
				t.Errorf("8 layers: device activation peak %d with offload, %d without: want less than half", off[8], plain[8])
			}
		})
	}
}

// TestNestedCheckpointsOnHost: two-level checkpoints with offloaded
// activations keep the inputs of the segments' blocks, saved while a
// segment is recomputed, on the host as well: the host holds about
// k + n/k block inputs at once rather than Every's n, and the device one
// block input more than under Every (the segment's input, a leaf of its
// recompute, stays there through the segment's backward).
func TestNestedCheckpointsOnHost(t *testing.T) {
	const layers = 16
	dev, host := cpu.New(), cpu.New()
	m := newMLP(t, dev, layers, 0)
	defer m.release()
	input := int64(8 * 48 * 4) // one block's input, f32 [8, 48]
	run := func(p checkpoint.Policy) (devPeak, hostPeak int64) {
		a, err := offload.NewActivations(host, 0)
		if err != nil {
			t.Fatal(err)
		}
		return peaks(t, m, dev, host, a.Runner(p.Runner()), tensor.SaveHooks(a))
	}
	everyDev, everyHost := run(checkpoint.Every)
	nestedDev, nestedHost := run(checkpoint.Nested(4))
	t.Logf("host: %d B under Every, %d B under Nested(4) (block input %d B); device: %d and %d B", everyHost, nestedHost, input, everyDev, nestedDev)
	if everyHost < (layers-2)*input {
		t.Errorf("Every's host peak %d B: want the %d blocks' inputs, %d B at least", everyHost, layers-2, (layers-2)*input)
	}
	// 4 segment inputs and 4 block inputs of the segment in backward,
	// the last block's working set (not recomputed: its activations are
	// saved), and the model's input and output rows.
	if bound := everyHost - (layers-10)*input; nestedHost > bound {
		t.Errorf("Nested(4)'s host peak %d B, want at most %d B (Every's %d B less %d block inputs)", nestedHost, bound, everyHost, layers-10)
	}
	if nestedDev > everyDev+input {
		t.Errorf("Nested(4)'s device peak %d B is over Every's %d B and a block input", nestedDev, everyDev)
	}
}

// TestActivationsRetainGraph: a retained graph unpacks again in a second
// backward and gives the same gradients twice over.
func TestActivationsRetainGraph(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	m := newMLP(t, dev, 2, 0)
	defer m.release()
	a, _ := offload.NewActivations(host, 1)
	run := func(opts ...tensor.ScopeOption) []float32 {
		for _, q := range m.m.Parameters() {
			q.SetGrad(nil)
		}
		err := tensor.Step(func(s *tensor.Scope) error {
			l := s.CrossEntropy(m.m.Forward(nn.NewRun(s, 1), m.in), m.tgt, tensor.CrossEntropyOptions{})
			l.Backward(tensor.RetainGraph())
			l.Backward()
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.m.Parameters()[0].Grad().Float32s()
	}
	want := run()
	got := run(tensor.SaveHooks(a))
	if !slices.Equal(got, want) {
		t.Fatal("gradients after two passes differ with offload")
	}
	if a.Live() != 0 || host.Memory().Stats().Allocated.Current != 0 {
		t.Errorf("%d storages, %d bytes left on the host", a.Live(), host.Memory().Stats().Allocated.Current)
	}
}

// TestActivationsVersionCheck: a saved tensor written in place after it was
// packed still fails backward, naming the op.
func TestActivationsVersionCheck(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	a, _ := offload.NewActivations(host, 0)
	w, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4}, []int{4}, memory.Parameter)
	w.SetRequiresGrad(true)
	defer w.Release()
	err := tensor.Step(func(s *tensor.Scope) error {
		x := s.Mul(w, w) // an activation
		y := s.Mul(x, x) // saves x, which moves to the host
		s.ReluInPlace(x)
		s.Sum(y, false).Backward()
		return nil
	}, tensor.SaveHooks(a))
	if err == nil {
		t.Fatal("in-place write to a packed saved tensor: no error")
	}
	t.Log(err)
	if a.Live() != 0 || host.Memory().Stats().Allocated.Current != 0 {
		t.Errorf("%d storages, %d bytes left on the host after the error", a.Live(), host.Memory().Stats().Allocated.Current)
	}
}

// TestActivationsGraphFreedWithoutBackward: a graph dropped without
// backward frees the host copies.
func TestActivationsGraphFreedWithoutBackward(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	m := newGPT(t, dev, 2, 0)
	defer m.release()
	a, _ := offload.NewActivations(host, 1)
	err := tensor.Step(func(s *tensor.Scope) error {
		m.m.Forward(nn.NewRun(s, 1), m.in)
		if a.Live() == 0 {
			t.Error("nothing moved to the host")
		}
		return nil
	}, tensor.SaveHooks(a))
	if err != nil {
		t.Fatal(err)
	}
	if a.Live() != 0 || host.Memory().Stats().Allocated.Current != 0 || dev.Memory().Stats().Category(memory.Activation).Current != 0 {
		t.Errorf("left: %d storages, host %d bytes, device activations %d bytes", a.Live(), host.Memory().Stats().Allocated.Current, dev.Memory().Stats().Category(memory.Activation).Current)
	}
}

func TestNewActivationsErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		host   device.Device
		window int
	}{{"no host", nil, 0}, {"negative window", cpu.New(), -1}} {
		if _, err := offload.NewActivations(c.host, c.window); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestActivationsPrefetchAsync: prefetched storages copied on a goroutine
// of their own (CPU devices) give the synchronous prefetch's loss,
// gradients, statistics and peaks on both allocators, to the byte: the
// allocations happen at the same moments, only the copies move.
func TestActivationsPrefetchAsync(t *testing.T) {
	for _, b := range builders {
		for _, window := range []int{1, 2} {
			t.Run(b.name+"/"+strconv.Itoa(window), func(t *testing.T) {
				type run struct {
					res        result
					stats      offload.Stats
					devP, hstP int64
				}
				do := func(async bool) run {
					defer offload.SetAsyncPrefetch(async)()
					dev, host := cpu.New(), cpu.New()
					m := b.make(t, dev, 4, 0.1)
					defer m.release()
					a, _ := offload.NewActivations(host, window)
					res := step(t, m, a.Runner(checkpoint.Segments(2).Runner()), tensor.SaveHooks(a))
					if a.Live() != 0 || host.Memory().Stats().Requested.Current != 0 || dev.Memory().Stats().Category(memory.Activation).Current != 0 {
						t.Errorf("async %v: left %d storages, %d host bytes", async, a.Live(), host.Memory().Stats().Requested.Current)
					}
					return run{res, a.Stats(), dev.Memory().Stats().Requested.Peak, host.Memory().Stats().Requested.Peak}
				}
				sync, async := do(false), do(true)
				if !equal(sync.res, async.res) {
					t.Error("loss or gradients differ")
				}
				if sync.stats != async.stats || sync.devP != async.devP || sync.hstP != async.hstP {
					t.Errorf("asynchronous %+v, device peak %d, host peak %d; synchronous %+v, %d, %d",
						async.stats, async.devP, async.hstP, sync.stats, sync.devP, sync.hstP)
				}
				if async.stats.Prefetched == 0 {
					t.Error("nothing prefetched")
				}
			})
		}
	}
}

// TestActivationsPrefetchAborted: a backward that fails while prefetched
// copies are in flight returns its error; every storage is freed on both
// sides once its copy has finished, and nothing waits forever.
func TestActivationsPrefetchAborted(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	m := newGPT(t, dev, 4, 0)
	defer m.release()
	// A node after block 1 whose backward fails, as running out of
	// memory there would: blocks 3 and 2 are differentiated first, and
	// prefetch blocks 1 and 0.
	boom := func(r *nn.Run, y *tensor.Tensor) *tensor.Tensor {
		plain := tensor.NewScope(tensor.NoGrad())
		d := plain.Keep(plain.Detach(y))
		plain.Close()
		return r.Function("boom", d, []*tensor.Tensor{y}, nil, func(*tensor.Scope, *tensor.Tensor, []*tensor.Tensor) []*tensor.Tensor {
			panic(&memory.OOMError{Requested: 1, Device: "test"})
		})
	}
	runner := func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
		h := x
		for i, b := range blocks {
			y := b.Forward(r, h)
			if h != x {
				h.Release()
			}
			if i == 1 {
				z := boom(r, y)
				y.Release()
				y = z
			}
			h = y
		}
		return h
	}
	a, _ := offload.NewActivations(host, 2)
	m.m.(interface{ SetBlockRunner(nn.BlockRunner) }).SetBlockRunner(a.Runner(runner))
	err := tensor.Step(func(s *tensor.Scope) error {
		logits := m.m.Forward(nn.NewRun(s, 1), m.in)
		l := s.CrossEntropy(s.Reshape(logits, -1, m.classes), m.tgt, tensor.CrossEntropyOptions{})
		logits.Release()
		l.Backward()
		return nil
	}, tensor.SaveHooks(a))
	if !tensor.IsOOM(err) {
		t.Fatalf("backward: %v, want the failure", err)
	}
	if a.Stats().Prefetched == 0 {
		t.Error("nothing was prefetched before the failure")
	}
	for _, q := range m.m.Parameters() {
		q.SetGrad(nil)
	}
	if a.Live() != 0 || host.Memory().Stats().Requested.Current != 0 || dev.Memory().Stats().Category(memory.Activation).Current != 0 {
		t.Errorf("left: %d storages, host %d bytes, device activations %d bytes", a.Live(), host.Memory().Stats().Requested.Current, dev.Memory().Stats().Category(memory.Activation).Current)
	}
}

// A saved leaf that wants a gradient stays on the device (whoever reads
// its gradient holds it there): only the results of ops move, and the
// gradients are the same.
func TestActivationsKeepLeaves(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	a, _ := offload.NewActivations(host, 0)
	// A leaf counted as an activation: a tiled block's input leaf, say.
	x, err := tensor.FromFloat32(dev, []float32{1, 2, 3, 4}, []int{4}, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	x.SetRequiresGrad(true)
	err = tensor.Step(func(s *tensor.Scope) error {
		y := s.Mul(x, x) // saves the leaf: stays
		z := s.Mul(y, y) // saves y: moves
		s.Sum(z, false).Backward()
		return nil
	}, tensor.SaveHooks(a))
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Packed != 1 || st.PackedB != 16 {
		t.Errorf("%d storages (%d bytes) moved to the host, want y's one of 16", st.Packed, st.PackedB)
	}
	// d(x⁴)/dx = 4x³.
	if got, want := x.Grad().Float64s(), []float64{4, 32, 108, 256}; !slices.Equal(got, want) {
		t.Errorf("gradient %v, want %v", got, want)
	}
}
