package offload_test

import (
	"testing"
	"time"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/tensor"
)

// BenchmarkBase times training steps (forward and backward, bf16
// autocast, every block checkpointed) of a small Llama whose blocks'
// Linear weights are frozen in nf4, as QLoRA's base is, alternating a
// model whose base stays on the device with one whose base streams from
// a second CPU device (offload.Base; the trace's prefetches after the
// first step), and reports the ratio of their summed times (streamed /
// resident) and of the streamed steps with the copies made on the
// training goroutine (sync) to those made by the copier goroutine.
// cores as in BenchmarkOverlap: split gives the device one thread.
//
//	go test ./offload -run '^$' -bench Base -benchtime 10x -count 3
func BenchmarkBase(b *testing.B) {
	for _, split := range []bool{false, true} {
		cores := "shared"
		if split {
			cores = "split"
		}
		b.Run("cores="+cores, func(b *testing.B) {
			const batch, ctx, vocab = 4, 128, 256
			newDev := func() *cpu.Device {
				if split {
					return cpu.New(cpu.Threads(1))
				}
				return cpu.New()
			}
			host := cpu.New(cpu.Label("host"))
			build := func() (models.Model, *tensor.Tensor, *tensor.Tensor) {
				dev := newDev()
				m, err := models.New("llama", dev, models.Spec{Layers: 4, Width: 256, Heads: 4, KVHeads: 2, Hidden: 704,
					Context: ctx, InShape: []int{ctx}, Classes: vocab, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				linear := nn.LinearWeights(m)
				for _, blk := range m.(nn.Model).Blocks() {
					for _, p := range blk.Parameters() {
						if linear[p] {
							p.SetRequiresGrad(false)
							if err := p.ConvertTo(tensor.NF4); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				toks := make([]int32, batch*ctx)
				for i := range toks {
					toks[i] = int32(i * 31 % vocab)
				}
				x, _ := tensor.FromInt32(dev, toks, []int{batch, ctx}, memory.Data)
				y, _ := tensor.FromInt32(dev, toks, []int{batch * ctx}, memory.Data)
				return m, x, y
			}
			plain, px, py := build()
			streamed, sx, sy := build()
			defer func() {
				for _, m := range []models.Model{plain, streamed} {
					for _, p := range m.Parameters() {
						p.Release()
					}
				}
				for _, t := range []*tensor.Tensor{px, py, sx, sy} {
					t.Release()
				}
			}()
			base, err := offload.NewBase(host, streamed.(nn.Model).Blocks(), func(p *tensor.Tensor) bool { return p.DType() == tensor.NF4 })
			if err != nil {
				b.Fatal(err)
			}
			plain.(nn.Model).SetBlockRunner(checkpoint.Every.Runner())
			streamed.(nn.Model).SetBlockRunner(base.Runner(checkpoint.Every.Runner()))
			step := func(m models.Model, x, y *tensor.Tensor, bs *offload.Base, async bool) time.Duration {
				defer offload.SetAsyncPrefetch(async)()
				start := time.Now()
				err := tensor.Step(func(s *tensor.Scope) error {
					if bs != nil {
						if err := bs.BeforeForward(); err != nil {
							return err
						}
					}
					logits := m.Forward(nn.NewRun(s, 1), x)
					l := s.CrossEntropy(s.Reshape(logits, -1, vocab), y, tensor.CrossEntropyOptions{})
					logits.Release()
					l.Backward()
					if bs != nil {
						return bs.Settle()
					}
					return nil
				}, tensor.Autocast(tensor.BF16))
				for _, p := range m.Parameters() {
					p.SetGrad(nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			step(plain, px, py, nil, true)
			step(streamed, sx, sy, base, true) // records the trace
			b.ResetTimer()
			var tp, ts, tsync time.Duration
			for i := range b.N {
				for k := range 3 {
					switch (i + k) % 3 {
					case 0:
						tp += step(plain, px, py, nil, true)
					case 1:
						ts += step(streamed, sx, sy, base, true)
					case 2:
						tsync += step(streamed, sx, sy, base, false)
					}
				}
			}
			b.ReportMetric(float64(ts)/float64(tp), "streamed/resident")
			b.ReportMetric(float64(tsync)/float64(ts), "sync/async")
			b.ReportMetric(float64(tp.Milliseconds())/float64(b.N), "resident-ms/step")
			b.ReportMetric(float64(base.Bytes())/float64(1<<20), "base-MiB")
		})
	}
}
