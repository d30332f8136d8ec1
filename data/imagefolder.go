package data

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // decoders for image.Decode
	_ "image/png"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
)

// ImageFolderOptions says how OpenImageFolder turns files into Images.
type ImageFolderOptions struct {
	// Width and Height are the size every image is resized to (bilinear);
	// 0 means 32.
	Width, Height int
	// Gray gives one channel (luma) instead of three (RGB).
	Gray bool
	// Mean and Std normalise each channel after scaling to [0, 1] (see
	// Normalize); empty means no normalisation.
	Mean, Std []float32
	// MaxPixels refuses images larger than this many pixels before
	// decoding them; 0 means 64 megapixels.
	MaxPixels int
}

// ImageFolder is a dataset of image files laid out one subfolder per
// class (root/cat/1.png, root/dog/a.jpg ...), classes and files in name
// order. Only the list of names is held; images are decoded by Get.
type ImageFolder struct {
	root    string
	classes []string
	files   []string
	ends    []int // ends[c]: number of files of classes 0..c
	opt     ImageFolderOptions
}

func isImageName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".png", ".jpg", ".jpeg":
		return true
	}
	return false
}

// OpenImageFolder lists the class subfolders of root and the PNG and JPEG
// files under each (searched recursively). It fails when root is missing,
// has no class subfolders, or a class has no images.
func OpenImageFolder(root string, opt ImageFolderOptions) (*ImageFolder, error) {
	if opt.Width == 0 {
		opt.Width = 32
	}
	if opt.Height == 0 {
		opt.Height = 32
	}
	if opt.MaxPixels == 0 {
		opt.MaxPixels = 64 << 20
	}
	if opt.Width < 0 || opt.Height < 0 || opt.MaxPixels < 0 {
		return nil, fileErr("imagefolder", root, "size %dx%d (max %d pixels): want positive values", opt.Width, opt.Height, opt.MaxPixels)
	}
	c := 3
	if opt.Gray {
		c = 1
	}
	if err := normalize(Image{Pixels: make([]float32, c), Shape: []int{c}}, opt.Mean, opt.Std); err != nil {
		return nil, fileErr("imagefolder", root, "%v", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, openErr("imagefolder", root, err)
	}
	d := &ImageFolder{root: root, opt: opt}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(root, e.Name())
		var files []string
		err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.Type().IsRegular() && isImageName(p) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, openErr("imagefolder", dir, err)
		}
		if len(files) == 0 {
			return nil, fileErr("imagefolder", dir, "class folder holds no PNG or JPEG images")
		}
		sort.Strings(files)
		d.classes = append(d.classes, e.Name())
		d.files = append(d.files, files...)
		d.ends = append(d.ends, len(d.files))
	}
	if len(d.classes) == 0 {
		return nil, fileErr("imagefolder", root, "no class subfolders (want one folder of images per class)")
	}
	return d, nil
}

// Len returns the number of images.
func (d *ImageFolder) Len() int { return len(d.files) }

// Classes returns the class names; label i is Classes()[i].
func (d *ImageFolder) Classes() []string { return slices.Clone(d.classes) }

// NumClasses returns the number of classes.
func (d *ImageFolder) NumClasses() int { return len(d.classes) }

// Path returns the file of image i.
func (d *ImageFolder) Path(i int) string { return d.files[i] }

// Label returns the class of image i without decoding it.
func (d *ImageFolder) Label(i int) int {
	return sort.SearchInts(d.ends, i+1)
}

// Get decodes image i, converts it to the configured channels, resizes it
// and normalises it: an Image of shape [C, Height, Width].
func (d *ImageFolder) Get(i int) (Example, error) {
	if i < 0 || i >= len(d.files) {
		return nil, fmt.Errorf("imagefolder: %s: index %d out of range [0, %d)", d.root, i, len(d.files))
	}
	path := d.files[i]
	px, c, err := d.decode(path)
	if err != nil {
		return nil, recordErr("imagefolder", path, i, err)
	}
	im := Image{Pixels: px, Shape: []int{c, d.opt.Height, d.opt.Width}, Label: d.Label(i)}
	if err := normalize(im, d.opt.Mean, d.opt.Std); err != nil {
		return nil, recordErr("imagefolder", path, i, err)
	}
	return im, nil
}

func (d *ImageFolder) decode(path string) ([]float32, int, error) {
	f, _, err := regularfile.Open(path)
	if err != nil {
		return nil, 0, openErr("imagefolder", path, err).Err
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(bufio.NewReader(f))
	if err != nil {
		return nil, 0, fmt.Errorf("decode: %v", err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > int64(d.opt.MaxPixels) {
		return nil, 0, fmt.Errorf("%s of %dx%d pixels: want at least 1 and at most %d pixels", format, cfg.Width, cfg.Height, d.opt.MaxPixels)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil, 0, err
	}
	img, _, err := image.Decode(bufio.NewReader(f))
	if err != nil {
		return nil, 0, fmt.Errorf("decode %s: %v", format, err)
	}
	c := 3
	if d.opt.Gray {
		c = 1
	}
	src, h, w := planes(img, c)
	return resizeBilinear(src, c, h, w, d.opt.Height, d.opt.Width), c, nil
}

// planes converts img to c channel planes (1: luma, 3: RGB) of values in
// [0, 1], channels first.
func planes(img image.Image, c int) ([]float32, int, int) {
	b := img.Bounds()
	h, w := b.Dy(), b.Dx()
	out := make([]float32, c*h*w)
	set := func(y, x int, r, g, bl float32) {
		i := y*w + x
		if c == 1 {
			out[i] = 0.299*r + 0.587*g + 0.114*bl
			return
		}
		out[i], out[h*w+i], out[2*h*w+i] = r, g, bl
	}
	const s8 = 1.0 / 255
	switch m := img.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				v := float32(row[x]) * s8
				set(y, x, v, v, v)
			}
		}
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				p := row[4*x:]
				a := float32(p[3]) * s8
				set(y, x, float32(p[0])*s8*a, float32(p[1])*s8*a, float32(p[2])*s8*a)
			}
		}
	case *image.RGBA:
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				p := row[4*x:]
				set(y, x, float32(p[0])*s8, float32(p[1])*s8, float32(p[2])*s8)
			}
		}
	case *image.YCbCr:
		for y := range h {
			for x := range w {
				yi, ci := m.YOffset(b.Min.X+x, b.Min.Y+y), m.COffset(b.Min.X+x, b.Min.Y+y)
				r, g, bl := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				set(y, x, float32(r)*s8, float32(g)*s8, float32(bl)*s8)
			}
		}
	default:
		const s16 = 1.0 / 65535
		for y := range h {
			for x := range w {
				r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
				set(y, x, float32(r)*s16, float32(g)*s16, float32(bl)*s16)
			}
		}
	}
	return out, h, w
}

// resizeBilinear resamples c planes of h×w to oh×ow with bilinear
// interpolation, pixel centres aligned (half-pixel offsets), edges clamped.
func resizeBilinear(src []float32, c, h, w, oh, ow int) []float32 {
	if h == oh && w == ow {
		return src
	}
	type tap struct {
		i0, i1 int
		f      float32
	}
	taps := func(n, on int) []tap {
		t := make([]tap, on)
		scale := float64(n) / float64(on)
		for o := range t {
			s := (float64(o)+0.5)*scale - 0.5
			s = min(max(s, 0), float64(n-1))
			i0 := int(s)
			t[o] = tap{i0, min(i0+1, n-1), float32(s - float64(i0))}
		}
		return t
	}
	ty, tx := taps(h, oh), taps(w, ow)
	out := make([]float32, c*oh*ow)
	for ch := range c {
		p := src[ch*h*w:]
		for y, a := range ty {
			r0, r1 := p[a.i0*w:], p[a.i1*w:]
			dst := out[(ch*oh+y)*ow:]
			for x, b := range tx {
				top := r0[b.i0] + (r0[b.i1]-r0[b.i0])*b.f
				bot := r1[b.i0] + (r1[b.i1]-r1[b.i0])*b.f
				dst[x] = top + (bot-top)*a.f
			}
		}
	}
	return out
}
