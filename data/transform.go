package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Transform changes an example as the loader reads it. rng is a random
// stream that depends only on the loader's seed, the epoch and the
// example's dataset index; a deterministic transform ignores it. Apply
// may modify the example's slices in place.
type Transform interface {
	Apply(ex Example, rng *rand.Rand) (Example, error)
}

// TransformFunc adapts a function to Transform.
type TransformFunc func(ex Example, rng *rand.Rand) (Example, error)

// Apply calls f.
func (f TransformFunc) Apply(ex Example, rng *rand.Rand) (Example, error) { return f(ex, rng) }

// Normalize maps every value v of channel c of an Image to
// (v - Mean[c]) / Std[c]. The channel is the first dimension of the
// image's shape; Mean and Std hold one value per channel, or one value for
// all.
type Normalize struct {
	Mean, Std []float32
}

// Apply normalises an Image in place; it fails on any other example.
func (n Normalize) Apply(ex Example, _ *rand.Rand) (Example, error) {
	im, ok := ex.(Image)
	if !ok {
		return nil, fmt.Errorf("normalize: %T is not an image", ex)
	}
	if err := normalize(im, n.Mean, n.Std); err != nil {
		return nil, err
	}
	return im, nil
}

func normalize(im Image, mean, std []float32) error {
	if len(mean) == 0 && len(std) == 0 {
		return nil
	}
	c := 1
	if len(im.Shape) > 0 {
		c = im.Shape[0]
	}
	if (len(mean) != 1 && len(mean) != c) || len(std) != len(mean) {
		return fmt.Errorf("normalize: %d means and %d deviations for an image of %d channels", len(mean), len(std), c)
	}
	for _, s := range std {
		if !(s > 0) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("normalize: standard deviation %v: want a positive finite value", s)
		}
	}
	plane := len(im.Pixels) / c
	for ch := range c {
		m, s := mean[0], std[0]
		if len(mean) > 1 {
			m, s = mean[ch], std[ch]
		}
		inv := 1 / s
		p := im.Pixels[ch*plane : (ch+1)*plane]
		for i, v := range p {
			p[i] = (v - m) * inv
		}
	}
	return nil
}

// imageDims returns the channels, height and width of an image of shape
// [H, W] or [C, H, W].
func imageDims(op string, im Image) (c, h, w int, err error) {
	switch len(im.Shape) {
	case 2:
		c, h, w = 1, im.Shape[0], im.Shape[1]
	case 3:
		c, h, w = im.Shape[0], im.Shape[1], im.Shape[2]
	default:
		return 0, 0, 0, fmt.Errorf("%s: image of shape %v: want [H, W] or [C, H, W]", op, im.Shape)
	}
	if c*h*w != len(im.Pixels) {
		return 0, 0, 0, fmt.Errorf("%s: image of shape %v holds %d values", op, im.Shape, len(im.Pixels))
	}
	return c, h, w, nil
}

// RandomCrop pads an image with Padding zeros on every side and cuts out
// a Height×Width window at a random place (as CIFAR augmentation does).
type RandomCrop struct {
	Height, Width, Padding int
}

// Apply crops an Image; the result has shape [C, Height, Width] (or
// [Height, Width] for a two-dimensional image).
func (rc RandomCrop) Apply(ex Example, rng *rand.Rand) (Example, error) {
	im, ok := ex.(Image)
	if !ok {
		return nil, fmt.Errorf("random crop: %T is not an image", ex)
	}
	c, h, w, err := imageDims("random crop", im)
	if err != nil {
		return nil, err
	}
	p := rc.Padding
	if rc.Height < 1 || rc.Width < 1 || p < 0 || rc.Height > h+2*p || rc.Width > w+2*p {
		return nil, fmt.Errorf("random crop: %dx%d with padding %d does not fit an image of %dx%d", rc.Height, rc.Width, p, h, w)
	}
	y0 := rng.IntN(h+2*p-rc.Height+1) - p
	x0 := rng.IntN(w+2*p-rc.Width+1) - p
	out := make([]float32, c*rc.Height*rc.Width)
	for ch := range c {
		for y := range rc.Height {
			sy := y0 + y
			if sy < 0 || sy >= h {
				continue
			}
			dst := out[(ch*rc.Height+y)*rc.Width:][:rc.Width]
			src := im.Pixels[(ch*h+sy)*w:][:w]
			for x := range rc.Width {
				if sx := x0 + x; sx >= 0 && sx < w {
					dst[x] = src[sx]
				}
			}
		}
	}
	shape := []int{c, rc.Height, rc.Width}
	if len(im.Shape) == 2 {
		shape = shape[1:]
	}
	return Image{Pixels: out, Shape: shape, Label: im.Label}, nil
}

// RandomFlip mirrors an image left to right (top to bottom when Vertical)
// with probability one half.
type RandomFlip struct {
	Vertical bool
}

// Apply flips an Image in place, or leaves it as it is.
func (rf RandomFlip) Apply(ex Example, rng *rand.Rand) (Example, error) {
	im, ok := ex.(Image)
	if !ok {
		return nil, fmt.Errorf("random flip: %T is not an image", ex)
	}
	c, h, w, err := imageDims("random flip", im)
	if err != nil {
		return nil, err
	}
	if rng.IntN(2) == 0 {
		return im, nil
	}
	for ch := range c {
		plane := im.Pixels[ch*h*w : (ch+1)*h*w]
		if rf.Vertical {
			for y := range h / 2 {
				a, b := plane[y*w:(y+1)*w], plane[(h-1-y)*w:(h-y)*w]
				for x := range a {
					a[x], b[x] = b[x], a[x]
				}
			}
			continue
		}
		for y := range h {
			row := plane[y*w : (y+1)*w]
			for i, j := 0, w-1; i < j; i, j = i+1, j-1 {
				row[i], row[j] = row[j], row[i]
			}
		}
	}
	return im, nil
}

// MeanStd computes the mean and standard deviation of every channel (the
// first dimension of each image's shape) over the first limit images of
// ds (all of them when limit <= 0), reading one example at a time. The
// results suit Normalize.
func MeanStd(ds Dataset, limit int) (mean, std []float32, err error) {
	n := ds.Len()
	if limit > 0 {
		n = min(n, limit)
	}
	var sum, sq []float64
	var count float64
	for i := range n {
		ex, err := ds.Get(i)
		if err != nil {
			return nil, nil, err
		}
		im, ok := ex.(Image)
		if !ok {
			return nil, nil, fmt.Errorf("data: mean/std: example %d is a %T, not an image", i, ex)
		}
		c := 1
		if len(im.Shape) > 0 {
			c = im.Shape[0]
		}
		if sum == nil {
			sum, sq = make([]float64, c), make([]float64, c)
		}
		if c != len(sum) || c == 0 || len(im.Pixels)%c != 0 {
			return nil, nil, fmt.Errorf("data: mean/std: example %d has shape %v, unlike the first", i, im.Shape)
		}
		plane := len(im.Pixels) / c
		for ch := range c {
			for _, v := range im.Pixels[ch*plane : (ch+1)*plane] {
				sum[ch] += float64(v)
				sq[ch] += float64(v) * float64(v)
			}
		}
		count += float64(plane)
	}
	if count == 0 {
		return nil, nil, fmt.Errorf("data: mean/std: no values in %d examples", n)
	}
	mean, std = make([]float32, len(sum)), make([]float32, len(sum))
	for ch := range sum {
		m := sum[ch] / count
		mean[ch] = float32(m)
		std[ch] = float32(math.Sqrt(max(sq[ch]/count-m*m, 0)))
	}
	return mean, std, nil
}
