package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/memfit/memfit/internal/regularfile"
)

// IDX element type codes (the third byte of the magic number).
const (
	IDXUint8   = 0x08
	IDXInt8    = 0x09
	IDXInt16   = 0x0B
	IDXInt32   = 0x0C
	IDXFloat32 = 0x0D
	IDXFloat64 = 0x0E
)

func idxElemSize(t byte) int {
	switch t {
	case IDXUint8, IDXInt8:
		return 1
	case IDXInt16:
		return 2
	case IDXInt32, IDXFloat32:
		return 4
	case IDXFloat64:
		return 8
	}
	return 0
}

// maxRecordBytes bounds one record so that a corrupt header cannot make
// Get allocate without limit.
const maxRecordBytes = 1 << 30

// idxHeader is a parsed, validated IDX header.
type idxHeader struct {
	typ    byte
	dims   []int
	elem   int   // bytes per element
	recLen int   // elements per record
	off    int64 // offset of the first record
}

// describeIDX renders what a header promises: "60000 images of 28x28",
// "60000 labels", "5 records of 2x3x4".
func describeIDX(dims []uint64) (what, unit string) {
	rest := make([]string, len(dims)-1)
	for i, d := range dims[1:] {
		rest[i] = fmt.Sprint(d)
	}
	switch len(dims) {
	case 1:
		return fmt.Sprintf("%d labels", dims[0]), "labels"
	case 3:
		return fmt.Sprintf("%d images of %s", dims[0], strings.Join(rest, "x")), "pixels"
	}
	return fmt.Sprintf("%d records of %s", dims[0], strings.Join(rest, "x")), "data"
}

// parseIDX reads and checks the header of an IDX file of the given size:
// magic (two zero bytes, a type code, the number of dimensions), the
// big-endian uint32 dimensions, and a payload of exactly the size they
// describe.
func parseIDX(r io.ReaderAt, size int64) (idxHeader, error) {
	var h idxHeader
	var magic [4]byte
	if size < 4 {
		return h, fmt.Errorf("file holds %d bytes, too short for an IDX header", size)
	}
	if _, err := r.ReadAt(magic[:], 0); err != nil {
		return h, fmt.Errorf("read header: %w", err)
	}
	if magic[0] != 0 || magic[1] != 0 {
		return h, fmt.Errorf("bad magic 0x%08x: want two zero bytes, a type code and a dimension count", binary.BigEndian.Uint32(magic[:]))
	}
	h.typ = magic[2]
	h.elem = idxElemSize(h.typ)
	if h.elem == 0 {
		return h, fmt.Errorf("unknown element type 0x%02x in magic 0x%08x", h.typ, binary.BigEndian.Uint32(magic[:]))
	}
	nd := int(magic[3])
	if nd == 0 {
		return h, errors.New("header has no dimensions")
	}
	h.off = 4 + 4*int64(nd)
	if size < h.off {
		return h, fmt.Errorf("header of %d dimensions needs %d bytes, file holds %d", nd, h.off, size)
	}
	raw := make([]byte, 4*nd)
	if _, err := r.ReadAt(raw, 4); err != nil {
		return h, fmt.Errorf("read header: %w", err)
	}
	dims := make([]uint64, nd)
	for i := range dims {
		dims[i] = uint64(binary.BigEndian.Uint32(raw[4*i:]))
	}
	what, unit := describeIDX(dims)
	rec := uint64(h.elem)
	for i, d := range dims[1:] {
		if d == 0 {
			return h, fmt.Errorf("header says %s: dimension %d is 0", what, i+1)
		}
		hi, lo := bits.Mul64(rec, d)
		if hi != 0 || lo > maxRecordBytes {
			return h, fmt.Errorf("header says %s: records of more than %d bytes are not supported", what, maxRecordBytes)
		}
		rec = lo
	}
	payload := uint64(size - h.off)
	hi, need := bits.Mul64(dims[0], rec)
	if hi != 0 || need != payload {
		if hi != 0 || need > math.MaxInt64 {
			return h, fmt.Errorf("header says %s, more than any file holds; file holds %d bytes of %s", what, payload, unit)
		}
		return h, fmt.Errorf("header says %s (%d bytes), file holds %d bytes of %s", what, need, payload, unit)
	}
	if dims[0] > math.MaxInt32 {
		return h, fmt.Errorf("header says %s: more records than supported", what)
	}
	h.dims = make([]int, nd)
	for i, d := range dims {
		h.dims[i] = int(d)
	}
	h.recLen = int(rec) / h.elem
	return h, nil
}

// IDX is an open IDX file (the format of MNIST and Fashion-MNIST) whose
// records are read on demand. A record is one slice along the first
// dimension.
type IDX struct {
	path string
	f    readerAtCloser
	h    idxHeader
}

type readerAtCloser interface {
	io.ReaderAt
	io.Closer
}

// OpenIDX opens an IDX file and checks its header against its size. A
// gzip-compressed file (recognised by its content, whatever its name) is
// decompressed once into the cache (see CacheDir) and the copy is read.
// Errors name path, also for problems found in the decompressed copy.
func OpenIDX(path string, opts ...Option) (*IDX, error) {
	f, _, err := regularfile.Open(path)
	if err != nil {
		return nil, openErr("idx", path, err)
	}
	if isGzip(f) {
		cached, err := gunzipCached(f, path, applyOptions(opts))
		f.Close()
		if err != nil {
			return nil, fileErr("idx", path, "%v", err)
		}
		if f, _, err = regularfile.Open(cached); err != nil {
			return nil, openErr("idx", path, err)
		}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, openErr("idx", path, err)
	}
	h, err := parseIDX(f, st.Size())
	if err != nil {
		if f.Name() != path {
			err = fmt.Errorf("decompressed to %s: %w", f.Name(), err)
		}
		f.Close()
		return nil, &Error{Format: "idx", Path: path, Record: -1, Err: err}
	}
	return &IDX{path: path, f: f, h: h}, nil
}

// Path returns the path the file was opened with.
func (x *IDX) Path() string { return x.path }

// Len returns the number of records (the first dimension).
func (x *IDX) Len() int { return x.h.dims[0] }

// Dims returns the dimensions from the header; the record shape is Dims()[1:].
func (x *IDX) Dims() []int { return append([]int(nil), x.h.dims...) }

// Type returns the element type code (IDXUint8 ...).
func (x *IDX) Type() byte { return x.h.typ }

// RecordLen returns the number of elements in a record.
func (x *IDX) RecordLen() int { return x.h.recLen }

// Close closes the file.
func (x *IDX) Close() error { return x.f.Close() }

func (x *IDX) readRaw(i int) ([]byte, error) {
	if i < 0 || i >= x.Len() {
		return nil, recordErr("idx", x.path, i, fmt.Errorf("out of range [0, %d)", x.Len()))
	}
	n := x.h.recLen * x.h.elem
	buf := make([]byte, n)
	if _, err := x.f.ReadAt(buf, x.h.off+int64(i)*int64(n)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, recordErr("idx", x.path, i, fmt.Errorf("read: %w", err))
	}
	return buf, nil
}

// Read stores record i in dst, which must hold RecordLen values, as the
// numbers stored (no scaling).
func (x *IDX) Read(i int, dst []float32) error {
	if len(dst) != x.h.recLen {
		return recordErr("idx", x.path, i, fmt.Errorf("destination of %d values for a record of %d", len(dst), x.h.recLen))
	}
	buf, err := x.readRaw(i)
	if err != nil {
		return err
	}
	decodeIDX(x.h.typ, buf, dst)
	return nil
}

func decodeIDX(typ byte, buf []byte, dst []float32) {
	switch typ {
	case IDXUint8:
		for j, b := range buf {
			dst[j] = float32(b)
		}
	case IDXInt8:
		for j, b := range buf {
			dst[j] = float32(int8(b))
		}
	case IDXInt16:
		for j := range dst {
			dst[j] = float32(int16(binary.BigEndian.Uint16(buf[2*j:])))
		}
	case IDXInt32:
		for j := range dst {
			dst[j] = float32(int32(binary.BigEndian.Uint32(buf[4*j:])))
		}
	case IDXFloat32:
		for j := range dst {
			dst[j] = math.Float32frombits(binary.BigEndian.Uint32(buf[4*j:]))
		}
	case IDXFloat64:
		for j := range dst {
			dst[j] = float32(math.Float64frombits(binary.BigEndian.Uint64(buf[8*j:])))
		}
	}
}

// Int returns the single integer of record i of a one-dimensional integer
// file (a labels file).
func (x *IDX) Int(i int) (int, error) {
	if len(x.h.dims) != 1 {
		return 0, recordErr("idx", x.path, i, fmt.Errorf("records of %v hold no single integer", x.h.dims[1:]))
	}
	buf, err := x.readRaw(i)
	if err != nil {
		return 0, err
	}
	switch x.h.typ {
	case IDXUint8:
		return int(buf[0]), nil
	case IDXInt8:
		return int(int8(buf[0])), nil
	case IDXInt16:
		return int(int16(binary.BigEndian.Uint16(buf))), nil
	case IDXInt32:
		return int(int32(binary.BigEndian.Uint32(buf))), nil
	}
	return 0, recordErr("idx", x.path, i, fmt.Errorf("element type 0x%02x is not an integer type", x.h.typ))
}

// IDXDataset pairs an IDX file of images with an IDX file of labels. Get
// reads one image and one label; unsigned-byte pixels are scaled to
// [0, 1], other types are returned as stored. A record of shape [H, W]
// becomes an Image of shape [1, H, W].
type IDXDataset struct {
	images, labels *IDX
	shape          []int

	classesOnce sync.Once
	classes     int
	classesErr  error
}

// OpenIDXImages opens an images file and a labels file (plain or gzip) and
// checks that they agree.
func OpenIDXImages(images, labels string, opts ...Option) (*IDXDataset, error) {
	im, err := OpenIDX(images, opts...)
	if err != nil {
		return nil, err
	}
	lb, err := OpenIDX(labels, opts...)
	if err != nil {
		im.Close()
		return nil, err
	}
	fail := func(e *Error) (*IDXDataset, error) {
		im.Close()
		lb.Close()
		return nil, e
	}
	if len(lb.h.dims) != 1 || idxElemSize(lb.h.typ) == 0 || lb.h.typ == IDXFloat32 || lb.h.typ == IDXFloat64 {
		return fail(fileErr("idx", labels, "labels file has dimensions %v of type 0x%02x, want one dimension of integers", lb.h.dims, lb.h.typ))
	}
	if lb.Len() != im.Len() {
		return fail(fileErr("idx", labels, "%d labels for %d images in %s", lb.Len(), im.Len(), images))
	}
	shape := im.h.dims[1:]
	if len(shape) == 2 {
		shape = []int{1, shape[0], shape[1]}
	}
	if len(shape) == 0 {
		shape = []int{1}
	}
	return &IDXDataset{images: im, labels: lb, shape: append([]int(nil), shape...)}, nil
}

// Len returns the number of images.
func (d *IDXDataset) Len() int { return d.images.Len() }

// Shape returns the shape of one image.
func (d *IDXDataset) Shape() []int { return append([]int(nil), d.shape...) }

// Label returns the label of image i without reading the image.
func (d *IDXDataset) Label(i int) (int, error) {
	l, err := d.labels.Int(i)
	if err == nil && l < 0 {
		err = recordErr("idx", d.labels.path, i, fmt.Errorf("negative label %d", l))
	}
	return l, err
}

// NumClasses returns one more than the largest label, reading the labels
// file once (streaming, in constant memory) on the first call.
func (d *IDXDataset) NumClasses() (int, error) {
	d.classesOnce.Do(func() {
		d.classesErr = d.scanLabels(func(_, l int) error {
			d.classes = max(d.classes, l+1)
			return nil
		})
	})
	return d.classes, d.classesErr
}

// CheckLabels checks that every label is below classes, naming the file
// and the first record that is not. It reads the labels file once,
// streaming (a byte per label for MNIST), so a bad label is found when the
// dataset is opened rather than when its batch comes up mid-run.
func (d *IDXDataset) CheckLabels(classes int) error {
	return d.scanLabels(func(i, l int) error {
		if l >= classes {
			return recordErr("idx", d.labels.path, i, fmt.Errorf("label %d is outside the %d classes [0, %d)", l, classes, classes))
		}
		return nil
	})
}

// scanLabels calls fn with every record's label in order, stopping at a
// read error, a negative label or fn's error.
func (d *IDXDataset) scanLabels(fn func(i, label int) error) error {
	r := bufio.NewReaderSize(io.NewSectionReader(d.labels.f, d.labels.h.off, int64(d.labels.Len()*d.labels.h.elem)), 64<<10)
	buf := make([]byte, d.labels.h.elem)
	for i := range d.labels.Len() {
		if _, err := io.ReadFull(r, buf); err != nil {
			return recordErr("idx", d.labels.path, i, fmt.Errorf("read: %w", err))
		}
		var l int
		switch d.labels.h.typ {
		case IDXUint8:
			l = int(buf[0])
		case IDXInt8:
			l = int(int8(buf[0]))
		case IDXInt16:
			l = int(int16(binary.BigEndian.Uint16(buf)))
		default:
			l = int(int32(binary.BigEndian.Uint32(buf)))
		}
		if l < 0 {
			return recordErr("idx", d.labels.path, i, fmt.Errorf("negative label %d", l))
		}
		if err := fn(i, l); err != nil {
			return err
		}
	}
	return nil
}

// Get reads image i and its label.
func (d *IDXDataset) Get(i int) (Example, error) {
	label, err := d.Label(i)
	if err != nil {
		return nil, err
	}
	px := make([]float32, d.images.h.recLen)
	if err := d.images.Read(i, px); err != nil {
		return nil, err
	}
	if d.images.h.typ == IDXUint8 {
		for j, v := range px {
			px[j] = v / 255
		}
	}
	return Image{Pixels: px, Shape: append([]int(nil), d.shape...), Label: label}, nil
}

// Close closes both files.
func (d *IDXDataset) Close() error {
	return errors.Join(d.images.Close(), d.labels.Close())
}

// MNIST opens the training set (train) or the test set of MNIST or
// Fashion-MNIST in dir: the standard names train-images-idx3-ubyte,
// train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte (or with a '.' before "idx"), plain or with a .gz
// suffix.
func MNIST(dir string, train bool, opts ...Option) (*IDXDataset, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	images, err := findMNIST(dir, prefix, "images", "idx3")
	if err != nil {
		return nil, err
	}
	labels, err := findMNIST(dir, prefix, "labels", "idx1")
	if err != nil {
		return nil, err
	}
	return OpenIDXImages(images, labels, opts...)
}

// FashionMNIST is MNIST for the Fashion-MNIST files, which use the same
// names. Debian's dataset-fashion-mnist package installs them in
// FashionMNISTDir.
func FashionMNIST(dir string, train bool, opts ...Option) (*IDXDataset, error) {
	return MNIST(dir, train, opts...)
}

// FashionMNISTDir is where Debian's dataset-fashion-mnist package puts the
// files.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses names the ten Fashion-MNIST labels.
var FashionMNISTClasses = [10]string{
	"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

func findMNIST(dir, prefix, kind, idx string) (string, error) {
	var tried []string
	for _, sep := range []string{"-", "."} {
		for _, ext := range []string{"", ".gz"} {
			name := prefix + "-" + kind + sep + idx + "-ubyte" + ext
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
			tried = append(tried, name)
		}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", fileErr("idx", dir, "no such directory")
	}
	return "", fileErr("idx", dir, "no %s %s file (looked for %s)", prefix, kind, strings.Join(tried, ", "))
}
