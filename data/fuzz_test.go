package data

import (
	"bytes"
	"testing"
)

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func FuzzIDXHeader(f *testing.F) {
	f.Add(idxBytes(IDXUint8, []int{2, 2, 2}, make([]byte, 8)))
	f.Add(idxBytes(IDXUint8, []int{3}, []byte{1, 2, 3}))
	f.Add(idxBytes(IDXInt16, []int{2, 1}, []byte{0xff, 0xfe, 0, 1}))
	f.Add(idxBytes(IDXFloat64, []int{1, 2}, make([]byte, 16)))
	f.Add(idxBytes(IDXInt32, []int{0, 1 << 20, 1 << 20}, nil))
	f.Add(idxBytes(IDXUint8, []int{10, 28, 28}, make([]byte, 1000)))
	f.Add([]byte{0, 0, 8, 3, 0, 0})
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseIDX(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if len(h.dims) == 0 || h.recLen < 1 || h.off+int64(h.dims[0])*int64(h.recLen*h.elem) != int64(len(b)) {
			t.Fatalf("accepted header %+v does not describe a file of %d bytes", h, len(b))
		}
		x := &IDX{path: "fuzz", f: nopCloser{bytes.NewReader(b)}, h: h}
		if x.Len() == 0 {
			return
		}
		dst := make([]float32, x.RecordLen())
		for _, i := range []int{0, x.Len() / 2, x.Len() - 1} {
			if err := x.Read(i, dst); err != nil {
				t.Fatalf("record %d of an accepted file: %v", i, err)
			}
			if len(h.dims) == 1 {
				x.Int(i)
			}
		}
		if x.Read(x.Len(), dst) == nil || x.Read(-1, dst) == nil {
			t.Fatal("out-of-range record read without error")
		}
	})
}

// FuzzShardHeader builds a shard from the fields that matter (the first
// header words and the payload) so that mutations are not spent on the
// unused rest of the 1024-byte header; opt&0x80 leaves the header
// unpadded (short files), the low bits choose the window options.
func FuzzShardHeader(f *testing.F) {
	hdr := func(magic, version, count int32) []byte { return shardBytes(magic, version, count, nil)[:12] }
	f.Add(hdr(ShardMagicGPT2, 1, 4), []byte{1, 0, 2, 0, 3, 0, 4, 0}, uint8(2))
	f.Add(hdr(ShardMagicLlama3, 7, 3), []byte{1, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint8(1))
	f.Add(hdr(ShardMagicGPT2, 1, 1000), make([]byte, 20), uint8(3))
	f.Add(hdr(ShardMagicGPT2, 2, 0), []byte{}, uint8(0))
	f.Add(hdr(12345, 1, -1), []byte{}, uint8(0))
	f.Add(make([]byte, 100), []byte{}, uint8(0x89))
	f.Fuzz(func(t *testing.T, head, payload []byte, opt uint8) {
		b := head
		if opt&0x80 == 0 {
			b = make([]byte, max(len(head), ShardHeaderBytes))
			copy(b, head)
		}
		b = append(b, payload...)
		ntok, width, err := parseShard(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		if ShardHeaderBytes+ntok*int64(width) != int64(len(b)) {
			t.Fatalf("accepted %d tokens of %d bytes in a file of %d bytes", ntok, width, len(b))
		}
		wo := WindowOptions{Context: int(opt%8) + 1, Random: opt&8 != 0, Seed: uint64(opt), Vocab: int(opt&0x70) * 20}
		tf := tokenFile{name: "fuzz", r: bytes.NewReader(b), off: ShardHeaderBytes, ntok: ntok, width: width}
		ds, err := newTokenDataset("shard", "fuzz", []tokenFile{tf}, nil, wo)
		if err != nil {
			return
		}
		for i := range min(ds.Len(), 16) {
			ex, err := ds.Get(i)
			if err != nil {
				continue // a token outside the vocabulary
			}
			if w := ex.(Window); len(w.Input) != wo.Context || len(w.Target) != wo.Context {
				t.Fatalf("window %d of %d/%d tokens, context %d", i, len(w.Input), len(w.Target), wo.Context)
			}
		}
	})
}
