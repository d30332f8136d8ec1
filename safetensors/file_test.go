package safetensors_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

// writeFile writes tensors to dir/name with Write.
func writeFile(t *testing.T, dir, name string, meta map[string]string, tensors ...safetensors.Source) string {
	t.Helper()
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every dtype round-trips through Write and Open, its bytes as written;
// mixed sizes are laid out largest first, each aligned to its size.
func TestWriteOpenRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var srcs []safetensors.Source
	dtypes := []safetensors.DType{safetensors.BOOL, safetensors.U8, safetensors.I8, safetensors.F8_E5M2, safetensors.F8_E4M3,
		safetensors.F8_E8M0, safetensors.F6_E2M3, safetensors.F6_E3M2, safetensors.F4, safetensors.I16, safetensors.U16,
		safetensors.F16, safetensors.BF16, safetensors.I32, safetensors.U32, safetensors.F32, safetensors.F64,
		safetensors.I64, safetensors.U64, safetensors.C64}
	for i, d := range dtypes {
		shape := []int{2, 4}
		n, err := safetensors.ByteSize(d, shape)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j)
		}
		srcs = append(srcs, safetensors.Source{Name: "t." + string(d), DType: d, Shape: shape, Data: b})
	}
	// One more through Fill, in two writes.
	srcs = append(srcs, safetensors.Source{Name: "filled", DType: safetensors.F32, Shape: []int{3}, Fill: func(w io.Writer) error {
		if err := safetensors.WriteFloat32s(w, []float32{1, 2}); err != nil {
			return err
		}
		return safetensors.WriteFloat32s(w, []float32{3})
	}})
	meta := map[string]string{"format": "test", "quant_state": `{"blocksize":64}`}
	p := writeFile(t, dir, "all.safetensors", meta, srcs...)
	f, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fmt.Sprint(f.Header.Metadata) != fmt.Sprint(meta) {
		t.Errorf("metadata %v, want %v", f.Header.Metadata, meta)
	}
	for _, s := range srcs[:len(srcs)-1] {
		got, ok := f.Tensor(s.Name)
		if !ok || got.DType != s.DType || !slices.Equal(got.Shape, s.Shape) || !bytes.Equal(got.Data, s.Data) || got.File != p {
			t.Errorf("%s: read %v %v %v, wrote %v %v %v", s.Name, got.DType, got.Shape, got.Data, s.DType, s.Shape, s.Data)
		}
		if size := s.DType.Size(); size > 0 && f.Header.Tensors[s.Name].Offsets[0]%int64(size) != 0 {
			t.Errorf("%s starts at %d, not aligned to %d", s.Name, f.Header.Tensors[s.Name].Offsets[0], size)
		}
	}
	filled, _ := f.Tensor("filled")
	if v, err := filled.Float32s(); err != nil || !slices.Equal(v, []float32{1, 2, 3}) {
		t.Errorf("filled tensor reads %v, %v", v, err)
	}
	if got := f.Names(); len(got) != len(srcs) || !slices.IsSorted(got) {
		t.Errorf("Names %v", got)
	}
}

func TestWriteRefuses(t *testing.T) {
	fill := func(n int) func(io.Writer) error {
		return func(w io.Writer) error { _, err := w.Write(make([]byte, n)); return err }
	}
	boom := errors.New("boom")
	cases := []struct {
		name string
		srcs []safetensors.Source
		want string
	}{
		{"short data", []safetensors.Source{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Data: make([]byte, 4)}}, "4 bytes for shape [2] of F32, which takes 8"},
		{"fill too short", []safetensors.Source{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Fill: fill(4)}}, "Fill wrote 4 of its 8 bytes"},
		{"fill too long", []safetensors.Source{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Fill: fill(12)}}, "Fill wrote more than its 8 bytes"},
		{"fill fails", []safetensors.Source{{Name: "a", DType: safetensors.F32, Shape: []int{2}, Fill: func(io.Writer) error { return boom }}}, "tensor a: boom"},
		{"both", []safetensors.Source{{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}, Fill: fill(1)}}, "both Data and Fill"},
		{"twice", []safetensors.Source{{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{1}}}, `"a" given twice`},
		{"metadata's name", []safetensors.Source{{Name: "__metadata__", DType: safetensors.U8, Shape: []int{0}}}, "reserved"},
		{"unknown dtype", []safetensors.Source{{Name: "a", DType: "Q4", Shape: []int{1}}}, `unknown dtype "Q4"`},
		{"overflowing shape", []safetensors.Source{{Name: "a", DType: safetensors.U8, Shape: []int{1 << 40, 1 << 40}}}, "more elements"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := safetensors.Write(io.Discard, nil, c.srcs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// shards writes a two-shard checkpoint of tensors a, b (shard 1) and c
// (shard 2) and its index, edited by edit.
func shards(t *testing.T, edit func(m map[string]string)) string {
	t.Helper()
	dir := t.TempDir()
	u8 := func(name string, v byte) safetensors.Source {
		return safetensors.Source{Name: name, DType: safetensors.U8, Shape: []int{1}, Data: []byte{v}}
	}
	writeFile(t, dir, "model-00001-of-00002.safetensors", nil, u8("a", 1), u8("b", 2))
	writeFile(t, dir, "model-00002-of-00002.safetensors", nil, u8("c", 3))
	m := map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}
	if edit != nil {
		edit(m)
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]int{"total_size": 3}, "weight_map": m})
	p := filepath.Join(dir, safetensors.IndexName)
	if err := os.WriteFile(p, idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenIndex(t *testing.T) {
	p := shards(t, nil)
	s, err := safetensors.OpenIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("names %v", got)
	}
	c, ok := s.Tensor("c")
	if !ok || !bytes.Equal(c.Data, []byte{3}) || filepath.Base(c.File) != "model-00002-of-00002.safetensors" {
		t.Errorf("c: %+v", c)
	}
	if len(s.Files()) != 2 {
		t.Errorf("%d files", len(s.Files()))
	}
}

func TestOpenIndexRefuses(t *testing.T) {
	cases := []struct {
		name string
		edit func(m map[string]string)
		want []string
	}{
		{"shard lacking the tensor", func(m map[string]string) {
			m["c"] = "model-00001-of-00002.safetensors"
			m["x"] = "model-00002-of-00002.safetensors"
		},
			[]string{"tensor c is in", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors holds it"}},
		{"tensor not listed", func(m map[string]string) { delete(m, "b") }, []string{"holds tensor b, which the index does not list"}},
		{"tensor listed nowhere", func(m map[string]string) { m["z"] = "model-00002-of-00002.safetensors" }, []string{"tensor z is in", "which does not hold it"}},
		{"missing shard", func(m map[string]string) { m["c"] = "model-00003-of-00003.safetensors" }, []string{"model-00003-of-00003.safetensors", "no such file"}},
		{"parent directory", func(m map[string]string) { m["c"] = "../model-00002-of-00002.safetensors" }, []string{"tensor c", `"../model-00002-of-00002.safetensors"`, "beside the index"}},
		{"absolute path", func(m map[string]string) { m["c"] = "/etc/passwd" }, []string{"tensor c", "beside the index"}},
		{"subdirectory", func(m map[string]string) { m["c"] = "sub/x.safetensors" }, []string{"beside the index"}},
		{"dot", func(m map[string]string) { m["c"] = "." }, []string{"beside the index"}},
		{"empty", func(m map[string]string) { clear(m) }, []string{"lists no tensors"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := shards(t, c.edit)
			s, err := safetensors.OpenIndex(p)
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// A tensor in two shards.
	p := shards(t, nil)
	dir := filepath.Dir(p)
	writeFile(t, dir, "model-00002-of-00002.safetensors", nil, safetensors.Source{Name: "a", DType: safetensors.U8, Shape: []int{1}, Data: []byte{9}})
	if _, err := safetensors.OpenIndex(p); err == nil || !strings.Contains(err.Error(), "tensor a is in both") {
		t.Errorf("a tensor in two shards: %v", err)
	}
	// An index that is not JSON.
	os.WriteFile(p, []byte("{"), 0o644)
	if _, err := safetensors.OpenIndex(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a broken index: %v", err)
	}
}

func ExampleWrite() {
	var buf bytes.Buffer
	err := safetensors.Write(&buf, map[string]string{"format": "pt"}, []safetensors.Source{
		// Bytes at hand.
		{Name: "quant_state", DType: safetensors.U8, Shape: []int{2}, Data: []byte("{}")},
		// Bytes computed when the writer reaches the tensor.
		{Name: "weight", DType: safetensors.F32, Shape: []int{2, 2}, Fill: func(w io.Writer) error {
			return safetensors.WriteFloat32s(w, []float32{1, 2, 3, 4})
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	h, data, err := safetensors.Decode(buf.Bytes())
	fmt.Println(h.Names(), len(data), err)
	w := h.Tensors["weight"]
	v, _ := safetensors.Float32s(w.DType, data[w.Offsets[0]:w.Offsets[1]])
	fmt.Println(v)
	// Output:
	// [weight quant_state] 18 <nil>
	// [1 2 3 4]
}
