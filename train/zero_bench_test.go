package train

import (
	"fmt"
	"testing"
)

// BenchmarkZeroStages trains the same GPT as N in-process ranks (NewLocal)
// under ZeRO 0 (replicas), 1, 2 and 3, and reports one rank's memory
// from its allocator — the peak of parameters + gradients + optimizer
// state at one moment (model-state-B), the per-category peaks, the
// peak of everything — and the global throughput. The figures in
// BENCHMARKS.md come from
//
//	go test ./train -run '^$' -bench ZeroStages -benchtime 1x
//
// Every stage runs in the same process, on the same cores, one after the
// other: compare throughputs within one run. Stage 3 runs twice, the
// second time with its gathers prefetched (zero=3p), and reports the
// share of rank 0's training time inside its collectives
// (%gather+reduce) and the share it waited for gathers (%gather-wait):
// prefetching moves gather time out of the wait.
func BenchmarkZeroStages(b *testing.B) {
	cfg := Default()
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Width, cfg.Model.Heads, cfg.Model.Context = "gpt", 4, 128, 4, 64
	cfg.Model.Dropout, cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Data.Workers = 0, true, 0, 0, 1
	cfg.Optim.Batch, cfg.Optim.Steps = 4, 12
	for _, ranks := range []int{2, 4} {
		for _, v := range []struct {
			zero     int
			prefetch bool
		}{{0, false}, {1, false}, {2, false}, {3, false}, {3, true}} {
			zero := v.zero
			name := fmt.Sprintf("ranks=%d/zero=%d", ranks, zero)
			if v.prefetch {
				name += "p"
			}
			b.Run(name, func(b *testing.B) {
				c := cfg
				c.Parallel.Zero, c.Parallel.ZeroPrefetch = zero, v.prefetch
				var sps, comm, wait float64
				var s Summary
				for range b.N {
					trs, sums := runRanks(b, c, ranks, nil)
					s = sums[0]
					sps += s.SamplesPerSec
					if z := trs[0].zero3(); z != nil {
						// The share of training time rank 0 spent in
						// ZeRO-3's gathers and reductions.
						comm += (z.GatherTime + z.ReduceTime).Seconds() / float64(trs[0].samples) * s.SamplesPerSec
						wait += z.GatherWait.Seconds() / float64(trs[0].samples) * s.SamplesPerSec
					}
				}
				p := s.PeakBytes
				b.ReportMetric(float64(p.ModelState), "model-state-B")
				b.ReportMetric(float64(p.Parameter), "param-B")
				b.ReportMetric(float64(p.Gradient), "grad-B")
				b.ReportMetric(float64(p.OptimizerState), "optstate-B")
				b.ReportMetric(float64(p.Total), "peak-B")
				b.ReportMetric(sps/float64(b.N), "samples/s")
				if zero == 3 {
					b.ReportMetric(100*comm/float64(b.N), "%gather+reduce")
					b.ReportMetric(100*wait/float64(b.N), "%gather-wait")
				}
			})
		}
	}
}
