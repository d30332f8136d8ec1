package tile_test

import (
	"fmt"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/tile"
)

// stepPeak is the allocator's peak during one LoRA step of a two-block
// Llama (width 512, 8 heads, 2 key/value heads, SwiGLU of hidden, bf16
// autocast) on t tokens, in requested bytes, less what was allocated
// before (the parameters and the batch): the activations, temporaries and
// the adapters' gradients.
func stepPeak(t *testing.T, dev device.Device, tokens, hidden int, tiles, ckpt bool) int64 {
	t.Helper()
	m := tiledLlama(t, dev, hidden, 32768, tiles, ckpt)
	defer nn.Release(m)
	x, err := tensor.New(dev, tensor.I32, []int{1, tokens}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	mem := dev.Memory()
	before := mem.Stats().Requested.Current
	mem.ResetPeak()
	err = tensor.Step(func(s *tensor.Scope) error {
		l := m.TokenLoss(nn.NewRun(s, 1), x, x, tensor.CrossEntropyOptions{})
		l.Backward()
		return nil
	}, tensor.Autocast(tensor.BF16))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Trainable(m) {
		p.SetGrad(nil)
	}
	return mem.Stats().Requested.Peak - before
}

// tiledLlama is the Llama these tests and benchmarks step: 2 blocks of
// width 512, 8 heads, 2 key/value heads, SwiGLU of hidden, LoRA rank 8 on
// every Linear layer, checkpointed per block when ckpt, its token-wise
// work over tiles of 2048 tokens when tiles.
func tiledLlama(tb testing.TB, dev device.Device, hidden, context int, tiles, ckpt bool) *models.Decoder {
	tb.Helper()
	m, err := models.NewDecoder(dev, models.DecoderConfig{Layers: 2, Heads: 8, KVHeads: 2, Dim: 512, Hidden: hidden, Context: context, Vocab: 256, Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := lora.Apply(m, nil, lora.Config{Rank: 8}); err != nil {
		nn.Release(m)
		tb.Fatal(err)
	}
	if ckpt {
		m.SetBlockRunner(checkpoint.Every.Runner())
	}
	if tiles {
		run, err := tile.New(2048)
		if err == nil {
			err = m.SetTokenRunner(run)
		}
		if err != nil {
			nn.Release(m)
			tb.Fatal(err)
		}
	}
	return m
}

// cpuPlanner is the meta device standing for the CPU, as a plan for it
// does: without what the CPU lacks (its attention kernels are not tiled).
func cpuPlanner() device.Device { return device.Without(meta.New(1<<40), device.Lacks("cpu")...) }

// Tiling the sequence takes the [T, hidden] intermediates of the MLP (and
// the norms' and projections' of every token) out of a block's peak: the
// peak then grows with T by the same bytes whatever the MLP's width, the
// buffers attention needs (its queries, keys and values, their expanded
// copies, its output and the kernel's workspace, the residual stream and
// their gradients), while without tiles it grows by the [T, hidden]
// products too. Planned on the meta device, whose allocator counts what
// the CPU's does (TestTiledPeakIsPlanned).
func TestTiledPeakDoesNotGrowWithTheMLP(t *testing.T) {
	const mib = 1 << 20
	for _, ckpt := range []bool{false, true} {
		growth := map[bool]map[int]int64{false: {}, true: {}}
		for _, hidden := range []int{1792, 3584} {
			for _, tiles := range []bool{false, true} {
				at8k := stepPeak(t, cpuPlanner(), 8192, hidden, tiles, ckpt)
				at16k := stepPeak(t, cpuPlanner(), 16384, hidden, tiles, ckpt)
				growth[tiles][hidden] = at16k - at8k
				t.Logf("checkpoint=%v hidden %d tiles=%v: peak %.1f MiB at T=8192, %.1f MiB at T=16384", ckpt, hidden, tiles, float64(at8k)/mib, float64(at16k)/mib)
			}
		}
		if a, b := growth[true][1792], growth[true][3584]; a != b {
			t.Errorf("checkpoint=%v: with tiles the peak grows by %d bytes from T=8192 to 16384 at hidden 1792, %d at 3584: a [T, hidden] buffer is left", ckpt, a, b)
		}
		// Without tiles at least the SwiGLU's gate, up and their product
		// ([T, hidden] in bf16 each) add to the growth.
		if extra := growth[false][1792] - growth[true][1792]; extra < 3*8192*1792*2 {
			t.Errorf("checkpoint=%v: tiles save %d bytes of the growth from T=8192 to 16384, want at least 3 [8192, 1792] bf16 buffers", ckpt, extra)
		}
	}
}

// The plan of a tiled step, the meta device's peak, is the CPU's measured
// peak to the byte.
func TestTiledPeakIsPlanned(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", ckpt), func(t *testing.T) {
			planned := stepPeak(t, cpuPlanner(), 4608, 256, true, ckpt)
			measured := stepPeak(t, cpu.New(), 4608, 256, true, ckpt)
			if planned != measured {
				t.Errorf("planned peak %d bytes, measured %d", planned, measured)
			}
		})
	}
}
