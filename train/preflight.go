package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Preflight refuses a run that cannot fit in capacity bytes however its
// batch is split, before anything is built on the real device. Out-of-
// memory recovery raises -accum until a micro-batch fits, so a run is
// refused only when its smallest possible step does not fit: one example
// per optimizer step, as planned on the meta device (milliseconds). A
// capacity of 0 is unlimited and checks nothing of the device. On a
// device with memory of its own (cuda), a run that offloads is refused
// the same way when that step's host side (PeakBytes.HostTotal) exceeds
// this machine's available memory less a margin (hostCapacity): on the
// CPU the device's capacity is that memory, and counts both. After -fit,
// which chose within both budgets, only the host side is checked, and
// only when -fit-host allowed more than the machine has.
func Preflight(cfg Config, capacity int64) error {
	// Under -dist a rank holds only its shard of the state (-zero), which
	// a single-process plan would overstate.
	if cfg.Parallel.Engine != "off" {
		return nil
	}
	dev := capacity > 0 && cfg.Fit == 0
	var host int64
	if !device.OnHost(cfg.Device.Name) && cfg.offloads() {
		host = max(hostCapacity(), 0)
		if cfg.Fit > 0 && cfg.FitHost <= host {
			host = 0
		}
	}
	if !dev && host == 0 {
		return nil
	}
	small := cfg.Resolved()
	small.Optim.Batch, small.Memory.Accum = 1, 1
	p, err := Plan(small)
	if err != nil {
		return err
	}
	if dev && need(small, p) > capacity {
		limit := "the machine's memory less a margin; -mem-limit sets it"
		if cfg.Device.MemLimit > 0 {
			limit = "-mem-limit"
		}
		return fmt.Errorf("%s cannot fit in %s (%s) with any -accum: one example per step needs %s (parameters %s, gradients %s, optimizer state %s, activations %s, temporaries %s, data %s); try -amp bf16, -checkpoint sqrt or -freeze, or a smaller model (-plan shows the breakdown)",
			modelKey(cfg), memory.FormatBytes(capacity), limit, memory.FormatBytes(need(small, p)),
			memory.FormatBytes(p.Parameter), memory.FormatBytes(p.Gradient), memory.FormatBytes(p.OptimizerState),
			memory.FormatBytes(p.Activation), memory.FormatBytes(p.Temporary), memory.FormatBytes(p.Data))
	}
	if host > 0 && p.HostTotal > host {
		needed, avail := memory.FormatBytes(p.HostTotal), memory.FormatBytes(host)
		if needed == avail {
			// Rounded alike: the bytes say which is more.
			needed, avail = fmt.Sprintf("%s (%d bytes)", needed, p.HostTotal), fmt.Sprintf("%s (%d bytes)", avail, host)
		}
		return fmt.Errorf("%s: -offload %s's host side cannot fit in this machine's memory with any -accum: one example per step needs %s of host memory (parameters %s, gradients %s, optimizer state %s, activations %s), and %s is available (its available memory less a margin); try -checkpoint every, -offload optimizer or a shorter -context, or a machine with more memory (-plan shows the breakdown; -fit chooses within it)",
			modelKey(cfg), cfg.Memory.Offload.Mode, needed,
			memory.FormatBytes(p.HostParameter), memory.FormatBytes(p.HostGradient), memory.FormatBytes(p.HostOptimizerState),
			memory.FormatBytes(p.HostActivation), avail)
	}
	return nil
}
