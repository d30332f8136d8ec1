package models_test

import (
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// sgd is plain SGD, p -= lr·grad, with the fused kernel; the gradients are
// then dropped (set-to-none), as an optimizer's ZeroGrad does.
func sgd(m nn.Module, lr float64) {
	for _, p := range nn.Trainable(m) {
		if g := p.Grad(); g != nil {
			tensor.SGDStep(p, g, nil, device.SGDHyper{LR: lr, GradScale: 1})
			p.SetGrad(nil)
		}
	}
}

// batchFunc returns the inputs and targets of a step (category Data; the
// caller releases them).
type batchFunc func(step int) (x, y *tensor.Tensor)

// train runs steps of forward, cross-entropy, backward and SGD, and returns
// the loss of every step.
func train(t *testing.T, m nn.Module, steps int, lr float64, batch batchFunc) []float64 {
	t.Helper()
	losses := make([]float64, steps)
	for step := range steps {
		x, y := batch(step)
		err := tensor.Step(func(s *tensor.Scope) error {
			loss := nn.CrossEntropy(s, m.Forward(nn.NewRun(s, uint64(step)), x), y)
			loss.Backward()
			losses[step] = loss.Item()
			return nil
		})
		x.Release()
		y.Release()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		sgd(m, lr)
	}
	return losses
}

func mustF32(t testing.TB, dev device.Device, v []float32, shape ...int) *tensor.Tensor {
	x, err := tensor.FromFloat32(dev, v, shape, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func mustI32(t testing.TB, dev device.Device, v []int32, shape ...int) *tensor.Tensor {
	x, err := tensor.FromInt32(dev, v, shape, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// clusters draws n points of dim features around classes Gaussian centres
// (a fixed set for a seed).
func clusters(t testing.TB, dev device.Device, rng *rand.Rand, centres [][]float64, n int) (x, y *tensor.Tensor) {
	dim := len(centres[0])
	xs := make([]float32, n*dim)
	ys := make([]int32, n)
	for i := range n {
		c := rng.IntN(len(centres))
		ys[i] = int32(c)
		for d := range dim {
			xs[i*dim+d] = float32(centres[c][d] + 0.7*rng.NormFloat64())
		}
	}
	return mustF32(t, dev, xs, n, dim), mustI32(t, dev, ys, n)
}

func randomCentres(rng *rand.Rand, classes, dim int) [][]float64 {
	cs := make([][]float64, classes)
	for c := range cs {
		cs[c] = make([]float64, dim)
		for d := range cs[c] {
			cs[c][d] = 1.5 * rng.NormFloat64()
		}
	}
	return cs
}

// squares draws n 28×28 images of faint noise with one bright 8×8 square;
// the class is the quadrant the square lies in.
func squares(t testing.TB, dev device.Device, rng *rand.Rand, n int) (x, y *tensor.Tensor) {
	const side, sq = 28, 8
	xs := make([]float32, n*side*side)
	ys := make([]int32, n)
	for i := range n {
		img := xs[i*side*side : (i+1)*side*side]
		for j := range img {
			img[j] = 0.2 * rng.Float32()
		}
		c := rng.IntN(4)
		ys[i] = int32(c)
		r0 := (c/2)*14 + rng.IntN(14-sq+1)
		c0 := (c%2)*14 + rng.IntN(14-sq+1)
		for r := r0; r < r0+sq; r++ {
			for col := c0; col < c0+sq; col++ {
				img[r*side+col] = 1
			}
		}
	}
	return mustF32(t, dev, xs, n, 1, side, side), mustI32(t, dev, ys, n)
}

// cycle draws n sequences of length steps+1 that repeat pattern from a
// random offset, split into inputs [n, steps] and next-token targets.
func cycle(t testing.TB, dev device.Device, rng *rand.Rand, pattern []int32, n, steps int) (x, y *tensor.Tensor) {
	xs := make([]int32, n*steps)
	ys := make([]int32, n*steps)
	for i := range n {
		off := rng.IntN(len(pattern))
		for j := range steps {
			xs[i*steps+j] = pattern[(off+j)%len(pattern)]
			ys[i*steps+j] = pattern[(off+j+1)%len(pattern)]
		}
	}
	return mustI32(t, dev, xs, n, steps), mustI32(t, dev, ys, n, steps)
}
