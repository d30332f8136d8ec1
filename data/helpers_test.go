package data

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes builds an IDX file: magic, big-endian dimensions, payload.
func idxBytes(typ byte, dims []int, payload []byte) []byte {
	b := []byte{0, 0, typ, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, payload...)
}

func writeFile(t testing.TB, path string, b []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// pixel is the value of pixel j of image i in generated IDX files.
func pixel(i, j int) byte { return byte(i*7 + j*3) }

// makeMNIST writes n images of h×w and their labels (i % 10) as IDX files.
func makeMNIST(t testing.TB, dir, prefix string, n, h, w int) (images, labels string) {
	t.Helper()
	px := make([]byte, n*h*w)
	for i := range n {
		for j := range h * w {
			px[i*h*w+j] = pixel(i, j)
		}
	}
	lb := make([]byte, n)
	for i := range lb {
		lb[i] = byte(i % 10)
	}
	images = writeFile(t, filepath.Join(dir, prefix+"-images-idx3-ubyte"), idxBytes(IDXUint8, []int{n, h, w}, px))
	labels = writeFile(t, filepath.Join(dir, prefix+"-labels-idx1-ubyte"), idxBytes(IDXUint8, []int{n}, lb))
	return images, labels
}

// shardBytes builds an llm.c shard header (magic, version, count) and
// appends payload.
func shardBytes(magic, version, count int32, payload []byte) []byte {
	b := make([]byte, ShardHeaderBytes)
	binary.LittleEndian.PutUint32(b[0:], uint32(magic))
	binary.LittleEndian.PutUint32(b[4:], uint32(version))
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	return append(b, payload...)
}

func writeShardFile(t testing.TB, path string, tokens []int32) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteShard(&buf, tokens); err != nil {
		t.Fatal(err)
	}
	return writeFile(t, path, buf.Bytes())
}

// wantErr checks that err is a *Error whose text names every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %q", parts)
	}
	var de *Error
	if !errors.As(err, &de) {
		t.Errorf("error %q (%T) is not a *data.Error", err, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

// batchHash digests everything a batch holds.
func batchHash(b *Batch) [32]byte {
	h := sha256.New()
	var w [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(w[:], v)
		h.Write(w[:])
	}
	put(uint64(b.Epoch))
	put(uint64(b.Index))
	for _, i := range b.Indices {
		put(uint64(i))
	}
	for _, v := range b.Inputs {
		put(uint64(math.Float32bits(v)))
	}
	for _, v := range b.Tokens {
		put(uint64(v))
	}
	for _, v := range b.Targets {
		put(uint64(v))
	}
	for _, d := range b.InputShape {
		put(uint64(d))
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// gridImages is an in-memory image dataset whose example i is computed
// from i: shape [c, h, w], label i % 10.
type gridImages struct {
	n, c, h, w int
}

func (g gridImages) Len() int { return g.n }

func (g gridImages) Get(i int) (Example, error) {
	px := make([]float32, g.c*g.h*g.w)
	for j := range px {
		px[j] = float32(i*1000 + j)
	}
	return Image{Pixels: px, Shape: []int{g.c, g.h, g.w}, Label: i % 10}, nil
}
