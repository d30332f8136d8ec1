package train

import (
	"fmt"

	"github.com/memfit/memfit/memory"
)

// Preflight refuses a run that cannot fit in capacity bytes however its
// batch is split, before anything is built on the real device. Out-of-
// memory recovery raises -accum until a micro-batch fits, so a run is
// refused only when its smallest possible step does not fit: one example
// per optimizer step, as planned on the meta device (milliseconds). A
// capacity of 0 is unlimited and checks nothing.
func Preflight(cfg Config, capacity int64) error {
	// Under -dist a rank holds only its shard of the state (-zero), which
	// a single-process plan would overstate.
	if capacity <= 0 || cfg.Fit > 0 || cfg.Parallel.Engine != "off" {
		return nil
	}
	small := cfg.Resolved()
	small.Optim.Batch, small.Memory.Accum = 1, 1
	p, err := Plan(small)
	if err != nil {
		return err
	}
	if need(small, p) <= capacity {
		return nil
	}
	limit := "the machine's memory less a margin; -mem-limit sets it"
	if cfg.Device.MemLimit > 0 {
		limit = "-mem-limit"
	}
	return fmt.Errorf("%s cannot fit in %s (%s) with any -accum: one example per step needs %s (parameters %s, gradients %s, optimizer state %s, activations %s, temporaries %s, data %s); try -amp bf16, -checkpoint sqrt or -freeze, or a smaller model (-plan shows the breakdown)",
		modelKey(cfg), memory.FormatBytes(capacity), limit, memory.FormatBytes(need(small, p)),
		memory.FormatBytes(p.Parameter), memory.FormatBytes(p.Gradient), memory.FormatBytes(p.OptimizerState),
		memory.FormatBytes(p.Activation), memory.FormatBytes(p.Temporary), memory.FormatBytes(p.Data))
}
