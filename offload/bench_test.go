package offload_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// BenchmarkOverlap times training steps of a GPT at the reference's
// widths (dim 384, 6 heads, vocabulary 256) with AdamW offloaded to a
// second CPU device, alternating a synchronous step (Step after
// backward) with an overlapped one (Arm before backward, Finish after)
// on the same model and optimizer, and reports the ratio of their summed
// times (below 1: the overlap gains) and the share of the synchronous
// step spent in Step (what the overlap can hide at most). Two batch
// shapes: the reference's 16×256, where backward dominates, and 2×64,
// where the update is a large part of the step. With cores=shared both
// devices use every core, as a CPU-only run does: backward keeps them
// busy, so the host's update has no idle core to overlap with. With
// cores=split each has one thread of its own, as a GPU and its host CPU
// are two processors: the update can hide behind backward.
//
//	go test ./offload -run '^$' -bench Overlap -benchtime 10x -count 3
func BenchmarkOverlap(b *testing.B) {
	for _, c := range []struct {
		layers, batch, ctx int
		split              bool
	}{{2, 16, 256, false}, {6, 2, 64, false}, {6, 2, 64, true}} {
		cores := "shared"
		if c.split {
			cores = "split"
		}
		b.Run(fmt.Sprintf("layers=%d/batch=%dx%d/cores=%s", c.layers, c.batch, c.ctx, cores), func(b *testing.B) {
			dev, host := cpu.New(), cpu.New()
			if c.split {
				dev, host = cpu.New(cpu.Threads(1)), cpu.New(cpu.Threads(1))
			}
			gpt, err := models.NewGPT(dev, models.GPTConfig{Layers: c.layers, Heads: 6, Dim: 384, Context: c.ctx, Vocab: 256, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			toks := make([]int32, c.batch*c.ctx)
			for i := range toks {
				toks[i] = int32(i * 31 % 256)
			}
			x, _ := tensor.FromInt32(dev, toks, []int{c.batch, c.ctx}, memory.Data)
			y, _ := tensor.FromInt32(dev, toks, []int{c.batch * c.ctx}, memory.Data)
			defer x.Release()
			defer y.Release()
			off, err := offload.NewOptimizer(host, gpt.Parameters())
			if err != nil {
				b.Fatal(err)
			}
			defer off.Release()
			opt, err := optim.New("adamw", off.Masters(), optim.Settings{LR: 1e-4, WeightDecay: 0.1})
			if err != nil {
				b.Fatal(err)
			}
			defer opt.Release()
			var inStep time.Duration // of the synchronous steps: in Step
			step := func(overlap bool) time.Duration {
				start := time.Now()
				err := tensor.Step(func(s *tensor.Scope) error {
					logits := gpt.Forward(nn.NewRun(s, 1), x)
					l := s.CrossEntropy(s.Reshape(logits, -1, 256), y, tensor.CrossEntropyOptions{})
					logits.Release()
					if overlap {
						if err := off.Arm(opt); err != nil {
							return err
						}
					}
					l.Backward()
					if overlap {
						return off.Finish()
					}
					t0 := time.Now()
					err := off.Step(opt.Step)
					inStep += time.Since(t0)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			step(false)
			step(true) // the first armed step counts the hooks' calls
			inStep = 0
			b.ResetTimer()
			var sync, over time.Duration
			for i := range b.N {
				// Alternate which goes first, so that neither always
				// follows the other.
				if i%2 == 0 {
					sync += step(false)
					over += step(true)
				} else {
					over += step(true)
					sync += step(false)
				}
			}
			b.ReportMetric(float64(over)/float64(sync), "overlapped/sync")
			b.ReportMetric(float64(inStep)/float64(sync), "step-share")
			b.ReportMetric(float64(sync.Milliseconds())/float64(b.N), "sync-ms/step")
			b.ReportMetric(float64(over.Milliseconds())/float64(b.N), "overlapped-ms/step")
		})
	}
}

// BenchmarkPrefetch times forward and backward of a GPT at the
// reference's widths with activations offloaded to a second CPU device,
// alternating prefetch window 0 (each tensor copied back as its node
// runs) with window 1 (the next block's tensors copied back on a
// goroutine of their own while backward differentiates this block), and
// reports the ratio of their summed times (below 1: prefetching gains),
// and the ratio of window 1's time to window 1's with the copies made
// synchronously on backward's goroutine (what the copier goroutine
// gains). cores as in BenchmarkOverlap: split gives the device one
// thread, so the copier has a core to itself, as a GPU's copy engine
// would.
//
//	go test ./offload -run '^$' -bench Prefetch -benchtime 10x -count 3
func BenchmarkPrefetch(b *testing.B) {
	for _, split := range []bool{false, true} {
		cores := "shared"
		if split {
			cores = "split"
		}
		b.Run("cores="+cores, func(b *testing.B) {
			dev, host := cpu.New(), cpu.New()
			if split {
				dev = cpu.New(cpu.Threads(1))
			}
			const batch, ctx = 8, 128
			gpt, err := models.NewGPT(dev, models.GPTConfig{Layers: 4, Heads: 6, Dim: 384, Context: ctx, Vocab: 256, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, p := range gpt.Parameters() {
					p.Release()
				}
			}()
			toks := make([]int32, batch*ctx)
			for i := range toks {
				toks[i] = int32(i * 31 % 256)
			}
			x, _ := tensor.FromInt32(dev, toks, []int{batch, ctx}, memory.Data)
			y, _ := tensor.FromInt32(dev, toks, []int{batch * ctx}, memory.Data)
			defer x.Release()
			defer y.Release()
			step := func(window int, async bool) time.Duration {
				defer offload.SetAsyncPrefetch(async)()
				a, _ := offload.NewActivations(host, window)
				gpt.SetBlockRunner(a.Runner(nil))
				start := time.Now()
				err := tensor.Step(func(s *tensor.Scope) error {
					logits := gpt.Forward(nn.NewRun(s, 1), x)
					l := s.CrossEntropy(s.Reshape(logits, -1, 256), y, tensor.CrossEntropyOptions{})
					logits.Release()
					l.Backward()
					return nil
				}, tensor.SaveHooks(a))
				for _, p := range gpt.Parameters() {
					p.SetGrad(nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			step(0, true)
			step(1, true)
			b.ResetTimer()
			var w0, w1, w1sync time.Duration
			for i := range b.N {
				// Rotate the order, so that none always follows another.
				for k := range 3 {
					switch (i + k) % 3 {
					case 0:
						w0 += step(0, true)
					case 1:
						w1 += step(1, true)
					case 2:
						w1sync += step(1, false)
					}
				}
			}
			b.ReportMetric(float64(w1)/float64(w0), "window1/window0")
			b.ReportMetric(float64(w1)/float64(w1sync), "async/sync")
			b.ReportMetric(float64(w0.Milliseconds())/float64(b.N), "window0-ms/step")
		})
	}
}
