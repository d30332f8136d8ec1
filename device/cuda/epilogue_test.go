//go:build cudaemu

package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/devicetest"
)

// TestBiasEpilogue checks that a product with a bias of C's dtype adds it
// in cuBLASLt's epilogue — no kernel writes the bias into C first — and
// agrees with the product that does (BiasEpilogue(false)), and that an F32
// bias under a 16-bit C is written into C first.
func TestBiasEpilogue(t *testing.T) {
	on, off := newTestDevice(t), newTestDevice(t, BiasEpilogue(false))
	rng := rand.New(rand.NewPCG(1, 9))
	for _, c := range []struct{ dt, bias device.DType }{{device.F32, device.F32}, {device.BF16, device.BF16}, {device.BF16, device.F32}} {
		t.Run(fmt.Sprintf("%v bias into %v", c.bias, c.dt), func(t *testing.T) {
			const m, n, k = 33, 19, 40
			r := func(n int) []float64 {
				v := make([]float64, n)
				for i := range v {
					v[i] = rng.Float64()*2 - 1
				}
				return v
			}
			av, bv, biasv := r(m*k), r(n*k), r(n)
			var results [][]float64
			for _, d := range []*Device{on, off} {
				a, b := upload(t, d, c.dt, []int{m, k}, av), upload(t, d, c.dt, []int{n, k}, bv)
				bias := upload(t, d, c.bias, []int{n}, biasv)
				out := upload(t, d, c.dt, []int{m, n}, nil)
				g := device.Gemm{TransB: true, M: m, N: n, K: k, Batch: 1, Alpha: 1, LDA: k, LDB: k, LDC: n,
					A: a.v, B: b.v, C: out.v, Bias: bias.v}
				d.ResetLaunchCounts()
				d.Gemm(g)
				var kernels []string
				for _, kc := range d.LaunchCounts().Kernels {
					kernels = append(kernels, kc.Name)
				}
				pass := len(kernels) > 0
				if want := d == off || c.bias != c.dt; pass != want {
					t.Errorf("epilogue %v: kernels %v besides the product; want a pass writing the bias first: %v", d.cfg.biasEpilogue, kernels, want)
				}
				if pass && !strings.HasPrefix(kernels[0], "k_co") {
					t.Errorf("the bias pass is %v", kernels)
				}
				results = append(results, download(d, out.v))
			}
			// The epilogue rounds once, the bias pass twice (a 16-bit C).
			compareRMS(t, "C", results[0], results[1], 2*devicetest.Tolerance(c.dt))
		})
	}
}
