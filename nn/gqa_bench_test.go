package nn_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// BenchmarkGQAStep times one step of a grouped-query attention layer on
// the CPU: forward and backward of Σ y² under bf16 autocast, width 512,
// 8 query heads of 64 over 2 key and value heads (Llama 3's ratio) and
// over 8 (no groups), rows of 2048 tokens. Besides ns/op it reports the
// process's CPU time per step (cpu-ns/op: user and system, every
// thread's), which other processes sharing the machine disturb less than
// the wall clock.
func BenchmarkGQAStep(b *testing.B) {
	const width, heads, tt = 512, 8, 2048
	for _, kv := range []int{2, 8} {
		b.Run(fmt.Sprintf("kv=%d", kv), func(b *testing.B) {
			dev := cpu.New()
			a, err := nn.NewGroupedQueryAttention(&nn.Builder{Dev: dev, Seed: 1}, "attn", nn.GQAConfig{
				Dim: width, Heads: heads, KVHeads: kv, Rotary: nn.RotaryConfig{HeadDim: width / heads, Theta: 10000}})
			if err != nil {
				b.Fatal(err)
			}
			defer nn.Release(a)
			x, err := tensor.Rand(dev, tensor.F32, []int{1, tt, width}, device.Uniform, -1, 1, 3, memory.Activation)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Release()
			step := func() {
				err := tensor.Step(func(s *tensor.Scope) error {
					y := a.Forward(nn.NewRun(s, 1), x)
					s.Sum(s.Mul(y, y), false).Backward()
					return nil
				}, tensor.Autocast(tensor.BF16))
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range nn.Trainable(a) {
					p.SetGrad(nil)
				}
			}
			step() // warm the allocator's cache
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
