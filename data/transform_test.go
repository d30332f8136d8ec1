package data

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	im := Image{Pixels: []float32{1, 2, 3, 4, 5, 6}, Shape: []int{2, 3}}
	ex, err := Normalize{Mean: []float32{2, 5}, Std: []float32{1, 0.5}}.Apply(im, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := ex.(Image).Pixels; !slices.Equal(got, []float32{-1, 0, 1, -2, 0, 2}) {
		t.Errorf("per-channel normalise: %v", got)
	}
	for _, n := range []Normalize{{Mean: []float32{0}, Std: []float32{0}}, {Mean: []float32{0, 0, 0}, Std: []float32{1, 1, 1}}} {
		if _, err := n.Apply(Image{Pixels: []float32{1, 2}, Shape: []int{2}}, nil); err == nil {
			t.Errorf("%+v: no error", n)
		}
	}
	if _, err := (Normalize{}).Apply(Window{}, nil); err == nil {
		t.Error("normalising a window: no error")
	}
}

func TestRandomCropAndFlip(t *testing.T) {
	// A 2-channel 4x4 image whose value encodes (channel, y, x).
	px := make([]float32, 32)
	for i := range px {
		px[i] = float32(100 + i)
	}
	orig := Image{Pixels: px, Shape: []int{2, 4, 4}, Label: 3}
	offsets := map[[2]int]bool{}
	for s := range uint64(200) {
		ex, err := RandomCrop{Height: 3, Width: 3, Padding: 1}.Apply(orig, rand.New(rand.NewPCG(s, 0)))
		if err != nil {
			t.Fatal(err)
		}
		im := ex.(Image)
		if !slices.Equal(im.Shape, []int{2, 3, 3}) || im.Label != 3 {
			t.Fatalf("crop shape %v label %d", im.Shape, im.Label)
		}
		// Find the crop's offset from any nonzero value and check the rest.
		dy, dx := 99, 99
		for j, v := range im.Pixels {
			if v != 0 {
				k := int(v) - 100
				dy, dx = (k%16)/4-(j%9)/3, k%4-j%3
				break
			}
		}
		for j, v := range im.Pixels {
			c, y, x := j/9, (j%9)/3+dy, j%3+dx
			want := float32(0)
			if y >= 0 && y < 4 && x >= 0 && x < 4 {
				want = float32(100 + c*16 + y*4 + x)
			}
			if v != want {
				t.Fatalf("seed %d: crop at (%d,%d) holds %v at %d, want %v", s, dy, dx, v, j, want)
			}
		}
		offsets[[2]int{dy, dx}] = true
	}
	if len(offsets) != 16 { // y0, x0 in {-1, 0, 1, 2}
		t.Errorf("200 crops use %d of the 16 offsets", len(offsets))
	}
	if _, err := (RandomCrop{Height: 7, Width: 3}).Apply(orig, rand.New(rand.NewPCG(1, 1))); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("oversized crop: %v", err)
	}

	flips := 0
	for s := range uint64(100) {
		im := Image{Pixels: slices.Clone(px), Shape: []int{2, 4, 4}}
		ex, _ := RandomFlip{}.Apply(im, rand.New(rand.NewPCG(s, 0)))
		got := ex.(Image).Pixels
		if got[0] == 103 && got[3] == 100 && got[16] == 119 {
			flips++
		} else if !slices.Equal(got, px) {
			t.Fatalf("flip is neither identity nor a mirror: %v", got)
		}
	}
	if flips < 30 || flips > 70 {
		t.Errorf("%d flips in 100", flips)
	}
	im := Image{Pixels: slices.Clone(px[:16]), Shape: []int{4, 4}}
	for s := uint64(0); ; s++ {
		ex, _ := RandomFlip{Vertical: true}.Apply(im, rand.New(rand.NewPCG(s, 0)))
		if got := ex.(Image).Pixels; got[0] != 100 {
			if got[0] != 112 || got[12] != 100 || got[5] != 109 {
				t.Errorf("vertical flip: %v", got)
			}
			break
		}
	}
}

func TestMeanStd(t *testing.T) {
	ds := gridImages{n: 10, c: 2, h: 1, w: 2}
	mean, std, err := MeanStd(ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Channel 0 holds i*1000+{0,1}, channel 1 i*1000+{2,3}.
	var s0, q0 float64
	for i := range 10 {
		for j := range 2 {
			v := float64(i*1000 + j)
			s0 += v
			q0 += v * v
		}
	}
	m0 := s0 / 20
	if math.Abs(float64(mean[0])-m0) > 1e-3 || math.Abs(float64(mean[1])-m0-2) > 1e-3 || math.Abs(float64(std[0])-math.Sqrt(q0/20-m0*m0)) > 1e-2 {
		t.Errorf("mean %v std %v", mean, std)
	}
}
