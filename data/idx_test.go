package data

import (
	"bufio"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestIDXRead(t *testing.T) {
	dir := t.TempDir()
	images, labels := makeMNIST(t, dir, "train", 12, 3, 4)
	ds, err := OpenIDXImages(images, labels)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if ds.Len() != 12 || !slices.Equal(ds.Shape(), []int{1, 3, 4}) {
		t.Fatalf("%d images of %v, want 12 of [1 3 4]", ds.Len(), ds.Shape())
	}
	for i := range 12 {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		im := ex.(Image)
		if im.Label != i%10 {
			t.Errorf("label %d: %d", i, im.Label)
		}
		for j, v := range im.Pixels {
			if v != float32(pixel(i, j))/255 {
				t.Fatalf("image %d pixel %d = %v, want %v", i, j, v, float32(pixel(i, j))/255)
			}
		}
	}
	if _, err := ds.Get(12); err == nil {
		t.Error("Get past the end: no error")
	}
	if n, err := ds.NumClasses(); n != 10 || err != nil {
		t.Errorf("NumClasses: %d, %v; want 10", n, err)
	}
}

func TestIDXElementTypes(t *testing.T) {
	dir := t.TempDir()
	vals := []float64{-3, 0, 2.5, 7}
	for _, tc := range []struct {
		typ  byte
		enc  func(v float64) []byte
		want []float32
	}{
		{IDXInt8, func(v float64) []byte { return []byte{byte(int8(v))} }, []float32{-3, 0, 2, 7}},
		{IDXInt16, func(v float64) []byte { return binary.BigEndian.AppendUint16(nil, uint16(int16(v))) }, []float32{-3, 0, 2, 7}},
		{IDXInt32, func(v float64) []byte { return binary.BigEndian.AppendUint32(nil, uint32(int32(v))) }, []float32{-3, 0, 2, 7}},
		{IDXFloat32, func(v float64) []byte { return binary.BigEndian.AppendUint32(nil, math.Float32bits(float32(v))) }, []float32{-3, 0, 2.5, 7}},
		{IDXFloat64, func(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }, []float32{-3, 0, 2.5, 7}},
	} {
		var payload []byte
		for _, v := range vals {
			payload = append(payload, tc.enc(v)...)
		}
		p := writeFile(t, filepath.Join(dir, "x"), idxBytes(tc.typ, []int{2, 2}, payload))
		x, err := OpenIDX(p)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 4)
		x.Read(0, got[:2])
		x.Read(1, got[2:])
		if !slices.Equal(got, tc.want) {
			t.Errorf("type 0x%02x: %v, want %v", tc.typ, got, tc.want)
		}
		x.Close()
	}
}

func TestIDXCorrupt(t *testing.T) {
	dir := t.TempDir()
	goodLabels := writeFile(t, filepath.Join(dir, "labels"), idxBytes(IDXUint8, []int{10}, make([]byte, 10)))
	header := idxBytes(IDXUint8, []int{10, 28, 28}, nil)
	truncGzip := gzipBytes(idxBytes(IDXUint8, []int{10, 28, 28}, make([]byte, 7840)))
	for _, tc := range []struct {
		name   string
		images []byte // written to dir/name; nil: not written (missing path)
		labels []byte // nil: goodLabels
		want   []string
	}{
		{"truncated", append(header, make([]byte, 1000)...), nil, []string{"header says 10 images of 28x28 (7840 bytes), file holds 1000 bytes of pixels"}},
		{"longer", append(header, make([]byte, 7841)...), nil, []string{"file holds 7841 bytes of pixels"}},
		{"empty", []byte{}, nil, []string{"file holds 0 bytes, too short for an IDX header"}},
		{"magic", append([]byte{0x08, 0x03, 0, 0}, make([]byte, 20)...), nil, []string{"bad magic 0x08030000"}},
		{"type", idxBytes(0x07, []int{1}, []byte{1}), nil, []string{"unknown element type 0x07"}},
		{"nodims", []byte{0, 0, 8, 0}, nil, []string{"no dimensions"}},
		{"cutheader", header[:9], nil, []string{"header of 3 dimensions needs 16 bytes, file holds 9"}},
		{"zerodim", idxBytes(IDXUint8, []int{10, 0, 28}, nil), nil, []string{"dimension 1 is 0"}},
		{"huge", idxBytes(IDXUint8, []int{1 << 31, 1 << 16, 1 << 16}, nil), nil, []string{"records of more than"}},
		{"vast", idxBytes(IDXFloat64, []int{0xffffffff, 0x4000, 0x1000}, nil), nil, []string{"header says 4294967295 images of 16384x4096 (2305843008676823040 bytes), file holds 0 bytes of pixels"}},
		{"labelcount", append(idxBytes(IDXUint8, []int{9, 28, 28}, nil), make([]byte, 9*784)...), nil, []string{"10 labels for 9 images"}},
		{"labelshape", append(header, make([]byte, 7840)...), idxBytes(IDXUint8, []int{10, 1}, make([]byte, 10)), []string{"want one dimension of integers"}},
		{"gzipgarbage", []byte{0x1f, 0x8b, 1, 2, 3, 4, 5}, nil, []string{"gzip:"}},
		{"gziptruncated", truncGzip[:len(truncGzip)/2], nil, []string{"gzip: unexpected EOF"}},
		{"missing", nil, nil, []string{"no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images := filepath.Join(dir, tc.name+"-images")
			if tc.images != nil {
				writeFile(t, images, tc.images)
			}
			labels := goodLabels
			if tc.labels != nil {
				labels = writeFile(t, filepath.Join(dir, tc.name+"-labels"), tc.labels)
			}
			ds, err := OpenIDXImages(images, labels, CacheDir(t.TempDir()))
			if err == nil {
				ds.Close()
			}
			where := images
			if tc.name == "labelcount" || tc.name == "labelshape" {
				where = labels
			}
			wantErr(t, err, append([]string{"idx: " + where + ": "}, tc.want...)...)
		})
	}
}

func TestFashionMNIST(t *testing.T) {
	if _, err := os.Stat(FashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST is not installed in %s (apt-get install dataset-fashion-mnist)", FashionMNISTDir)
	}
	cache := t.TempDir()
	for _, tc := range []struct {
		train    bool
		n, class int
	}{{true, 60000, 6000}, {false, 10000, 1000}} {
		ds, err := FashionMNIST(FashionMNISTDir, tc.train, CacheDir(cache))
		if err != nil {
			t.Fatal(err)
		}
		if ds.Len() != tc.n || !slices.Equal(ds.Shape(), []int{1, 28, 28}) {
			t.Errorf("train=%v: %d images of %v, want %d of [1 28 28]", tc.train, ds.Len(), ds.Shape(), tc.n)
		}
		counts := make([]int, 10)
		for i := range ds.Len() {
			l, err := ds.Label(i)
			if err != nil || l > 9 {
				t.Fatalf("label %d: %d, %v", i, l, err)
			}
			counts[l]++
		}
		for c, n := range counts {
			if n != tc.class {
				t.Errorf("train=%v: class %d (%s) has %d images, want %d", tc.train, c, FashionMNISTClasses[c], n, tc.class)
			}
		}
		if n, err := ds.NumClasses(); n != 10 || err != nil {
			t.Errorf("NumClasses: %d, %v; want 10", n, err)
		}
		ex, err := ds.Get(ds.Len() - 1)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := slices.Min(ex.(Image).Pixels), slices.Max(ex.(Image).Pixels)
		if lo < 0 || hi > 1 || hi == 0 {
			t.Errorf("pixels span [%v, %v], want values in [0, 1]", lo, hi)
		}
		ds.Close()
	}
}

func TestMNISTMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := FashionMNIST(dir, true)
	wantErr(t, err, dir, "train-images-idx3-ubyte.gz")
	_, err = FashionMNIST(filepath.Join(dir, "nope"), true)
	wantErr(t, err, "nope", "no such directory")
}

// heapWatch records the largest HeapInuse seen above a baseline.
type heapWatch struct {
	base, peak uint64
}

func newHeapWatch() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &heapWatch{base: ms.HeapInuse, peak: ms.HeapInuse}
}

func (h *heapWatch) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.peak = max(h.peak, ms.HeapInuse)
}

func (h *heapWatch) growth() uint64 { return h.peak - h.base }

const heapBound = 64 << 20

func TestIDXLargeBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 157 MB file")
	}
	const n, side = 200_000, 28
	dir := t.TempDir()
	path := filepath.Join(dir, "big-images-idx3-ubyte")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(idxBytes(IDXUint8, []int{n, side, side}, nil))
	img := make([]byte, side*side)
	for i := range n {
		for j := range img {
			img[j] = pixel(i, j)
		}
		w.Write(img)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	lb := make([]byte, n)
	for i := range lb {
		lb[i] = byte(i % 10)
	}
	labels := writeFile(t, filepath.Join(dir, "big-labels-idx1-ubyte"), idxBytes(IDXUint8, []int{n}, lb))
	lb = nil

	hw := newHeapWatch()
	ds, err := OpenIDXImages(path, labels)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	l, err := NewLoader(ds, LoaderConfig{Batch: 64, Shuffle: true, Seed: 1, Workers: 2, Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for b, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		for j, idx := range b.Indices {
			if b.Targets[j] != int32(idx%10) || b.Inputs[j*784+5] != float32(pixel(idx, 5))/255 {
				t.Fatalf("batch %d example %d does not hold image %d", b.Index, j, idx)
			}
		}
		hw.sample()
		if batches++; batches == 200 {
			break
		}
	}
	t.Logf("200 batches of 64 from %d images (%d MB): heap in use grew by at most %.1f MiB", n, (n*side*side)>>20, float64(hw.growth())/(1<<20))
	if hw.growth() > heapBound {
		t.Errorf("heap in use grew by %d MiB, bound %d MiB", hw.growth()>>20, heapBound>>20)
	}
}

// TestIDXCheckLabels: a label outside the classes is found when the
// dataset is opened, naming the file and the record.
func TestIDXCheckLabels(t *testing.T) {
	dir := t.TempDir()
	images, labels := makeMNIST(t, dir, "train", 30, 2, 2)
	ds, err := OpenIDXImages(images, labels)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if err := ds.CheckLabels(10); err != nil {
		t.Errorf("labels 0-9 against 10 classes: %v", err)
	}
	err = ds.CheckLabels(5)
	if err == nil || !strings.Contains(err.Error(), labels) || !strings.Contains(err.Error(), "record 5") || !strings.Contains(err.Error(), "label 5") {
		t.Errorf("labels 0-9 against 5 classes: %v; want the file, record 5 and label 5", err)
	}
}
