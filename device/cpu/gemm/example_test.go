package gemm_test

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device/cpu/gemm"
)

// C = A·Bᵀ for row-major A (2×3) and B (2×3): transB reads B transposed
// in place, as a layer's forward reads its [out, in] weight.
func ExampleSgemm() {
	a := []float32{1, 2, 3, 4, 5, 6}
	b := []float32{1, 0, 0, 0, 1, 0}
	c := make([]float32, 4)
	gemm.Sgemm(false, true, 2, 2, 3, 1, a, 3, b, 3, 0, c, 2)
	fmt.Println(c)
	// Output: [1 2 4 5]
}

// Options run one product on the calling goroutine and declare its
// triangle: LowerC computes only C's lower triangle (causal attention's
// scores) and zeroes the rest.
func ExampleOptions_Sgemm() {
	q := []float32{1, 2, 3, 4, 5, 6} // 3×2
	c := make([]float32, 9)
	gemm.Options{Threads: 1, Triangle: gemm.LowerC}.Sgemm(false, true, 3, 3, 2, 1, q, 2, q, 2, 0, c, 3)
	fmt.Println(c)
	// Output: [5 0 0 11 25 0 17 39 61]
}

// GemmBF16To multiplies bfloat16 matrices with float32 accumulation and
// rounds C to bfloat16 once per element.
func ExampleOptions_GemmBF16To() {
	// These values are exact in bfloat16: its bits are float32's top half.
	bf := func(xs ...float32) []uint16 {
		out := make([]uint16, len(xs))
		for i, x := range xs {
			out[i] = uint16(math.Float32bits(x) >> 16)
		}
		return out
	}
	a, b := bf(1, 2, 3, 4), bf(0.5, 0, 0, 0.25)
	c := make([]uint16, 4)
	gemm.Options{Threads: 1}.GemmBF16To(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	for _, h := range c {
		fmt.Print(gemm.BF16ToF32(h), " ")
	}
	fmt.Println()
	// Output: 0.5 0.5 1.5 1
}

// A linear layer's y = x·Wᵀ + b in one product: Options.Bias starts every
// row of C from b (beta must be 0), so no pass copies b into C first.
func ExampleOptions_bias() {
	x := []float32{1, 2, 3, 4}       // 2×2
	w := []float32{1, 0, 0, 1, 1, 1} // 3×2: [out, in]
	bias := []float32{0.5, -0.5, 10} // 3
	y := make([]float32, 6)
	gemm.Options{Bias: bias}.Sgemm(false, true, 2, 3, 2, 1, x, 2, w, 2, 0, y, 3)
	fmt.Println(y)
	// Output: [1.5 1.5 13 3.5 3.5 17]
}
