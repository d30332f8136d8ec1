//go:build cuda || cudaemu

package cuda

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda/internal/cu"
)

// CountsLaunches reports whether the device counts its launches: on the
// CUDA emulator (build tag cudaemu), not on a GPU.
func (d *Device) CountsLaunches() bool { return cu.Counting }

// ResetLaunchCounts starts counting launches, GEMMs and copies afresh. The
// emulator counts for the whole process: every device's work, from the
// first call on.
func (d *Device) ResetLaunchCounts() {
	_ = d.w.do(func() error { cu.CountLaunches(true); return nil })
}

// LaunchCounts returns what was counted since ResetLaunchCounts (empty on
// a GPU).
func (d *Device) LaunchCounts() LaunchCounts {
	var c cu.Counts
	_ = d.w.do(func() error { c = cu.LaunchCounts(); return nil })
	var out LaunchCounts
	for _, k := range c.Kernels {
		out.Kernels = append(out.Kernels, KernelCount{Name: k.Name, Launches: k.Launches, Blocks: k.Blocks,
			ReadBytes: k.ReadBytes, WriteBytes: k.WriteBytes, Accesses: k.Accesses})
	}
	for _, g := range c.Gemms {
		out.Gemms = append(out.Gemms, GemmCount{A: dtypeOf(g.AType), B: dtypeOf(g.BType), C: dtypeOf(g.CType),
			Compute: computeName(g.Compute), Calls: g.Calls, FMAs: g.FMAs, ReadBytes: g.ReadBytes, WriteBytes: g.WriteBytes})
	}
	for _, k := range c.Copies {
		out.Copies = append(out.Copies, CopyCount(k))
	}
	return out
}

func dtypeOf(t cu.DataType) device.DType {
	for _, d := range []device.DType{device.F32, device.F64, device.F16, device.BF16} {
		if cudaType(d) == t {
			return d
		}
	}
	return device.Invalid
}

func computeName(c cu.ComputeType) string {
	switch c {
	case cu.Compute32F:
		return "32F"
	case cu.Compute32FFastTF32:
		return "32F_FAST_TF32"
	case cu.Compute64F:
		return "64F"
	}
	return "?"
}
