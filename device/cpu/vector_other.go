//go:build !amd64 || purego

package cpu

import "github.com/memfit/memfit/device"

type adamConsts struct {
	gradScale, beta1, oneMinusBeta1, beta2, oneMinusBeta2 float32
	stepSize, invSqrtBC2, eps, wd, decay                  float32
}

// adamVector has no vector path on this platform.
func adamVector(p, g, m, v []float32, c *adamConsts) int { return 0 }

// geluVector has no vector path on this platform.
func geluVector(y, x []float32) int { return 0 }

// geluGradVector has no vector path on this platform.
func geluGradVector(out, x, g []float32) int { return 0 }

func geluBF16Vector(y, x []uint16) int { return 0 }

func geluGradBF16Vector(out, x, g []uint16) int { return 0 }

func bf16FromF32Vector(dst []uint16, src []float32) int { return 0 }

func f32FromBF16Vector(dst []float32, src []uint16) int { return 0 }

// hasAVX512 is false where no vector path is built.
var hasAVX512 = false

func expShiftVector(y, x []float32, shift float32) int { return 0 }

func reluVector(y, x []float32) int { return 0 }

func reluGradVector(out, v, g []float32) int { return 0 }

func maxVector(x []float32) (float32, int)                 { return 0, 0 }
func sumVector(x []float32) (float32, int)                 { return 0, 0 }
func dotVector(a, b []float32) (float32, int)              { return 0, 0 }
func scaleVector(y []float32, s float32) int               { return 0 }
func softmaxGradVector(out, y, g []float32, s float32) int { return 0 }

func sumSqDevVector(x []float32, mu float32) (float32, int)            { return 0, 0 }
func lnApplyVector(y, x, gm, bt []float32, mu, rs float32) int         { return 0 }
func lnGradDxVector(out, x, g, gm []float32, mu, rs, a, b float32) int { return 0 }
func lnGradStatsVector(x, g, gm, dg, db []float32, mu, rs float32) (s1, s2 float32, done int) {
	return 0, 0, 0
}

func binaryVector(op device.BinaryOp, y, a, b []float32) int { return 0 }

func binaryBF16Vector(op device.BinaryOp, y, a, b []uint16) int { return 0 }

func softmaxBF16Rows(y, x []uint16, tmp []float32, n int) bool { return false }

func softmaxGradBF16Rows(dx, y, dy []uint16, n int) bool { return false }
