package main

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/memfit/memfit/device/cuda"
)

// gpuProfiler is a device that times its GPU work with events: the CUDA
// device on a GPU.
type gpuProfiler interface {
	StartProfile() error
	Profile() (cuda.Profile, error)
}

// profileGroups are -kernels' groups of a GPU profile, in the order they
// are printed: each operation falls in the first whose test it passes.
var profileGroups = []struct {
	name string
	test func(o *cuda.OpTime) bool
}{
	{"nf4/int8 dequantization (k_dequant)", func(o *cuda.OpTime) bool { return strings.HasPrefix(o.Name, "k_dequant") }},
	{"products with a side of at most 64 (LoRA's rank)", func(o *cuda.OpTime) bool { return isGemm(o) && minSide(o.Name) <= 64 }},
	{"products, every side over 64 (the base's and the head's)", isGemm},
	{"attention forward", func(o *cuda.OpTime) bool { return isAttention(o) && !strings.Contains(o.Name, "bwd") }},
	{"attention backward", isAttention},
	{"copies on the copy stream (beside the compute stream)", func(o *cuda.OpTime) bool { return o.CopyStream }},
	{"copies and fills on the compute stream", func(o *cuda.OpTime) bool { return !strings.HasPrefix(o.Name, "k_") }},
	{"other kernels (norms, casts, pointwise, loss, optimizer)", func(*cuda.OpTime) bool { return true }},
}

func isGemm(o *cuda.OpTime) bool { return strings.HasPrefix(o.Name, "gemm ") }

func isAttention(o *cuda.OpTime) bool {
	return strings.HasPrefix(o.Name, "k_flash") || strings.HasPrefix(o.Name, "k_attention")
}

var gemmShape = regexp.MustCompile(` (\d+)×(\d+)×(\d+)`)

// minSide is the smallest of a product's m, n and k, from its name.
func minSide(name string) int {
	m := gemmShape.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	s := int(^uint(0) >> 1)
	for _, v := range m[1:] {
		n, _ := strconv.Atoi(v)
		s = min(s, n)
	}
	return s
}

// reportProfile writes a GPU profile of steps steps, per step: the groups
// the issue of an 8B step asks for (the GPU's time in each, and the GPU
// waiting for the host), the host's waits, and the longest operations.
func reportProfile(w io.Writer, p cuda.Profile, steps, top int) {
	s := time.Duration(max(steps, 1))
	per := func(d time.Duration) float64 { return ms(d / s) }
	share := func(d time.Duration) float64 {
		if p.Span <= 0 {
			return 0
		}
		return 100 * float64(d) / float64(p.Span)
	}
	sums := make([]time.Duration, len(profileGroups))
	calls := make([]int64, len(profileGroups))
	for _, o := range p.Ops {
		for i, g := range profileGroups {
			if g.test(o) {
				sums[i] += o.Time
				calls[i] += o.Calls
				break
			}
		}
	}
	fmt.Fprintf(w, "GPU time per step by group (share of the compute stream's span, %.2f ms a step):\n", per(p.Span))
	fmt.Fprintf(w, "%10s %6s %8s  %s\n", "ms/step", "share", "calls", "group")
	for i, g := range profileGroups {
		if calls[i] == 0 {
			continue
		}
		fmt.Fprintf(w, "%10.2f %5.1f%% %8d  %s\n", per(sums[i]), share(sums[i]), calls[i]/int64(s), g.name)
	}
	idle := p.Span - p.Busy
	fmt.Fprintf(w, "%10.2f %5.1f%% %8s  %s\n", per(idle), share(idle), "", "compute stream idle: the GPU waiting for the host (launches, synchronizations, host work)")
	if len(p.HostWaits) > 0 {
		fmt.Fprintln(w, "host blocked on the GPU per step:")
		for _, h := range p.HostWaits {
			fmt.Fprintf(w, "%10.2f %6s %8d  %s\n", per(h.Time), "", h.Calls/int64(s), h.Name)
		}
	}
	ops := slices.Clone(p.Ops)
	slices.SortStableFunc(ops, func(a, b *cuda.OpTime) int { return cmp.Compare(b.Time, a.Time) })
	n := min(top, len(ops))
	fmt.Fprintf(w, "the %d longest operations per step (of %d):\n", n, len(ops))
	for _, o := range ops[:n] {
		name := o.Name
		if o.CopyStream {
			name += " (copy stream)"
		}
		fmt.Fprintf(w, "%10.2f %5.1f%% %8d  %s\n", per(o.Time), share(o.Time), o.Calls/int64(s), name)
	}
	if p.Truncated {
		fmt.Fprintln(w, "(truncated: more operations than a profile keeps; the later ones are not counted)")
	}
}

// moduleLoader is a device that says how its kernels were loaded: the
// CUDA device.
type moduleLoader interface{ ModuleLoad() cuda.ModuleLoad }

// describeLoad says where the kernels came from and what each part took.
func describeLoad(l cuda.ModuleLoad) string {
	if l.Cached {
		return fmt.Sprintf("loaded from the disk cache in %.2f s", l.Load.Seconds())
	}
	return fmt.Sprintf("compiled: NVRTC %.2f s (0: PTX from the cache), the driver's JIT %.2f s, loading %.2f s", l.Compile.Seconds(), l.Link.Seconds(), l.Load.Seconds())
}
