//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

func init() {
	// Only where the CPU has the instructions (an AVX2-only EPYC has
	// none of AVX-512's): the engine that packs pairs so needs
	// AVX512-BF16, a later extension still.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL {
		pairPackers = append(pairPackers, struct {
			name string
			pack func(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int)
		}{"packPairsAVX512", packPairsAVX512})
	}
	if cpu.X86.HasAVX512F {
		f32Packers = append(f32Packers, struct {
			name string
			pack func(dst []float32, x mat[float32], i0, rows, p0, kc, mr, kg int)
		}{"packF32AVX512", packF32AVX512})
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL {
		for name, p := range map[string]func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int){
			"bf16": convertPackerAVX512(fmtBF16, bf16Table),
			"f16":  convertPackerAVX512(fmtF16, f16Table),
		} {
			convertPackers[name] = append(convertPackers[name], struct {
				name string
				pack func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int)
			}{"convertPackerAVX512", p})
		}
	}
}
