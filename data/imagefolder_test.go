package data

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

func pngBytes(t testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func jpegBytes(t testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func solid(w, h int, c color.Color) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, c)
		}
	}
	return img
}

func TestImageFolder(t *testing.T) {
	root := t.TempDir()
	red, blue := color.NRGBA{255, 0, 0, 255}, color.NRGBA{0, 0, 255, 255}
	writeFile(t, filepath.Join(root, "b_red", "2.png"), pngBytes(t, solid(10, 6, red)))
	writeFile(t, filepath.Join(root, "b_red", "1.JPG"), jpegBytes(t, solid(16, 16, red)))
	writeFile(t, filepath.Join(root, "b_red", "notes.txt"), []byte("ignored"))
	writeFile(t, filepath.Join(root, "a_blue", "deep", "x.jpeg"), jpegBytes(t, solid(7, 9, blue)))
	gray := image.NewGray(image.Rect(0, 0, 4, 4))
	for i := range gray.Pix {
		gray.Pix[i] = 51
	}
	writeFile(t, filepath.Join(root, "c_gray", "g.png"), pngBytes(t, gray))

	ds, err := OpenImageFolder(root, ImageFolderOptions{Width: 8, Height: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds.Classes(), []string{"a_blue", "b_red", "c_gray"}) || ds.NumClasses() != 3 || ds.Len() != 4 {
		t.Fatalf("classes %v, %d images", ds.Classes(), ds.Len())
	}
	want := []struct {
		label   int
		rgb     [3]float32
		tol     float32
		nameEnd string
	}{
		{0, [3]float32{0, 0, 1}, 0.02, "x.jpeg"},
		{1, [3]float32{1, 0, 0}, 0.02, "1.JPG"},
		{1, [3]float32{1, 0, 0}, 0, "2.png"},
		{2, [3]float32{0.2, 0.2, 0.2}, 0, "g.png"},
	}
	for i, w := range want {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		im := ex.(Image)
		if im.Label != w.label || ds.Label(i) != w.label || filepath.Base(ds.Path(i)) != w.nameEnd || !slices.Equal(im.Shape, []int{3, 5, 8}) {
			t.Errorf("image %d: label %d, %s, shape %v; want %d, %s", i, im.Label, ds.Path(i), im.Shape, w.label, w.nameEnd)
		}
		for c := range 3 {
			for _, v := range im.Pixels[c*40 : (c+1)*40] {
				if d := v - w.rgb[c]; d > w.tol+1e-6 || d < -w.tol-1e-6 {
					t.Fatalf("image %d channel %d holds %v, want %v", i, c, v, w.rgb[c])
				}
			}
		}
	}

	g, err := OpenImageFolder(root, ImageFolderOptions{Width: 3, Height: 3, Gray: true, Mean: []float32{0.5}, Std: []float32{0.25}})
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := g.Get(2) // red: luma 0.299
	im := ex.(Image)
	if !slices.Equal(im.Shape, []int{1, 3, 3}) || math.Abs(float64(im.Pixels[4])-(0.299-0.5)/0.25) > 1e-5 {
		t.Errorf("gray normalised red: shape %v, value %v", im.Shape, im.Pixels[4])
	}
}

func TestResizeBilinear(t *testing.T) {
	// A horizontal ramp stays a ramp; corners of an upscale are clamped.
	src := []float32{0, 1, 2, 3}
	got := resizeBilinear(src, 1, 1, 4, 1, 2)
	if !slices.Equal(got, []float32{0.5, 2.5}) {
		t.Errorf("downscale 4->2: %v", got)
	}
	got = resizeBilinear([]float32{0, 4}, 1, 1, 2, 1, 4)
	if !slices.Equal(got, []float32{0, 1, 3, 4}) {
		t.Errorf("upscale 2->4: %v", got)
	}
	got = resizeBilinear([]float32{0, 2, 4, 6}, 1, 2, 2, 1, 1)
	if !slices.Equal(got, []float32{3}) {
		t.Errorf("2x2 -> 1x1: %v", got)
	}
}

func TestImageFolderErrors(t *testing.T) {
	dir := t.TempDir()
	ok := pngBytes(t, solid(4, 4, color.White))
	t.Run("missing", func(t *testing.T) {
		_, err := OpenImageFolder(filepath.Join(dir, "nope"), ImageFolderOptions{})
		wantErr(t, err, "imagefolder: "+filepath.Join(dir, "nope")+": no such file or directory")
	})
	t.Run("empty", func(t *testing.T) {
		root := t.TempDir()
		_, err := OpenImageFolder(root, ImageFolderOptions{})
		wantErr(t, err, "imagefolder: "+root+": no class subfolders")
	})
	t.Run("emptyClass", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "a", "x.png"), ok)
		writeFile(t, filepath.Join(root, "b", "readme"), []byte("no images"))
		_, err := OpenImageFolder(root, ImageFolderOptions{})
		wantErr(t, err, "imagefolder: "+filepath.Join(root, "b")+": class folder holds no PNG or JPEG images")
	})
	t.Run("badOptions", func(t *testing.T) {
		_, err := OpenImageFolder(dir, ImageFolderOptions{Mean: []float32{0, 0}, Std: []float32{1, 1}})
		wantErr(t, err, "2 means and 2 deviations for an image of 3 channels")
	})
	t.Run("unreadable", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "a", "0.png"), ok)
		garbage := writeFile(t, filepath.Join(root, "a", "1.png"), []byte("this is not an image"))
		truncated := writeFile(t, filepath.Join(root, "a", "2.png"), ok[:len(ok)/2])
		huge := writeFile(t, filepath.Join(root, "a", "3.png"), pngBytes(t, image.NewGray(image.Rect(0, 0, 200, 200))))
		ds, err := OpenImageFolder(root, ImageFolderOptions{MaxPixels: 100 * 100})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ds.Get(0); err != nil {
			t.Fatal(err)
		}
		_, err = ds.Get(1)
		wantErr(t, err, "imagefolder: "+garbage+": record 1: decode: image: unknown format")
		_, err = ds.Get(2)
		wantErr(t, err, "imagefolder: "+truncated+": record 2: decode png:")
		_, err = ds.Get(3)
		wantErr(t, err, "imagefolder: "+huge+": record 3: png of 200x200 pixels: want at least 1 and at most 10000 pixels")
	})
}
