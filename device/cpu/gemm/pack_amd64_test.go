//go:build !purego

package gemm

func init() {
	pairPackers = append(pairPackers, struct {
		name string
		pack func(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int)
	}{"packPairsAVX512", packPairsAVX512})
}
