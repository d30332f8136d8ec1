package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

// file frames header JSON (padding it as Frame does) and appends n zero
// data bytes.
func file(header string, n int) []byte {
	return append(safetensors.Frame([]byte(header)), make([]byte, n)...)
}

// The encodings the reference implementation's own tests pin down, byte
// for byte: a tensor, an empty file, metadata alone.
func TestWriteReferenceBytes(t *testing.T) {
	f32 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	cases := []struct {
		name    string
		meta    map[string]string
		tensors []safetensors.Source
		header  string // the JSON, before padding
		data    []byte
	}{
		{"one tensor", nil, []safetensors.Source{{Name: "attn.0", DType: safetensors.F32, Shape: []int{1, 2, 3}, Data: f32(0, 1, 2, 3, 4, 5)}},
			`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, f32(0, 1, 2, 3, 4, 5)},
		{"empty", nil, nil, `{}`, nil},
		{"metadata only", map[string]string{"framework": "pt"}, nil, `{"__metadata__":{"framework":"pt"}}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := safetensors.Write(&buf, c.meta, c.tensors); err != nil {
				t.Fatal(err)
			}
			pad := (8 - len(c.header)%8) % 8
			want := binary.LittleEndian.AppendUint64(nil, uint64(len(c.header)+pad))
			want = append(append(want, c.header...), strings.Repeat(" ", pad)...)
			want = append(want, c.data...)
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("wrote\n%q\nwant\n%q", buf.Bytes(), want)
			}
			if _, _, err := safetensors.Decode(buf.Bytes()); err != nil {
				t.Errorf("reading it back: %v", err)
			}
		})
	}
}

// Hostile and malformed headers are errors that say what is wrong, never
// a panic or an allocation the file's size does not justify.
func TestParseHeaderRefuses(t *testing.T) {
	cases := []struct {
		name   string
		header string
		data   int
		want   string
	}{
		// Shape products that wrap around: the element count of
		// [3,5,17,257,641,65537,6700417] is 2^64-1 (-1 as an int64).
		{"wrapping shape, reversed range", `{"w":{"dtype":"F32","shape":[3,5,17,257,641,65537,6700417],"data_offsets":[8,4]}}`, 8, "more elements than an int64 counts"},
		{"huge shape over nothing", `{"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}}`, 0, "more elements than an int64 counts"},
		{"bytes overflow", `{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}`, 0, "more bytes than an int64 counts"},
		{"shape of zero-free product over an empty range", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,0]}}`, 0, "do not fit"},
		{"reversed range", `{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4, "do not fit"},
		{"negative offset", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}}`, 4, "do not fit"},
		{"range past the data", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 4, "do not fit"},
		{"negative dimension", `{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0, "dimension -1"},
		{"dimension past int64", `{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}`, 0, "shape"},
		{"fractional dimension", `{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}}`, 0, "shape"},
		{"unknown dtype", `{"w":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}}`, 1, `unknown dtype "F12"`},
		{"packed elements ending inside a byte", `{"w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}`, 1, "ends inside a byte"},
		{"no dtype", `{"w":{"shape":[1],"data_offsets":[0,1]}}`, 1, "no dtype"},
		{"no shape", `{"w":{"dtype":"U8","data_offsets":[0,1]}}`, 1, "no shape"},
		{"null shape", `{"w":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}`, 1, "no shape"},
		{"three offsets", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 1, "want [begin, end]"},
		{"no offsets", `{"w":{"dtype":"U8","shape":[1]}}`, 1, "want [begin, end]"},
		{"key spelt otherwise", `{"w":{"DType":"U8","shape":[1],"data_offsets":[0,1]}}`, 1, "no dtype"},
		{"key twice in an entry", `{"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}`, 1, `"dtype" appears twice`},
		{"tensor twice", `{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, `"w" appears twice`},
		{"entry not an object", `{"w":[1,2]}`, 0, "not an object"},
		{"header an array", `[]`, 0, "not a JSON object"},
		{"not JSON", `xxxxxxxx`, 0, "not JSON"},
		{"truncated JSON", `{"w":{"dtype":"U8"`, 0, "not JSON"},
		{"bytes after the object", `{}x`, 0, "after the object"},
		{"metadata not strings", `{"__metadata__":{"step":3}}`, 0, "metadata"},
		{"invalid UTF-8", "{\"w\xff\":{}}", 0, "UTF-8"},
		{"overlap", `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3, "a [0 2] and b [1 3] overlap"},
		{"same range twice", `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 2, "a [0 2] and b [0 2] overlap"},
		{"empty tensor inside another", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`, 4, "overlap"},
		{"hole", `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`, 4, "a [0 2] and b [3 4] leave data bytes [2 3]"},
		{"hole at the start", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, "a [1 2] is the first; data bytes [0 1]"},
		{"trailing bytes", `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 3, "a [0 1] is the last, but the data section holds 3 bytes (2 belong to no tensor)"},
		{"data without tensors", `{}`, 8, "8 data bytes but no tensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := safetensors.Decode(file(c.header, c.data))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestSplitRefuses(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short for a header"},
		{"seven bytes", make([]byte, 7), "too short for a header"},
		{"length past the file", append(binary.LittleEndian.AppendUint64(nil, 1<<40), "{}"...), "does not fit a file of 10 bytes"},
		{"length of 2^64-1", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), "does not fit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := safetensors.Split(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// Valid headers: empty tensors anywhere between others, scalars, every
// dtype, entries in any order in the JSON, padding, unknown keys skipped.
func TestParseHeaderAccepts(t *testing.T) {
	cases := []struct {
		name   string
		header string
		data   int
		names  []string // in data order
	}{
		{"no tensors", `{}`, 0, nil},
		{"metadata", `{"__metadata__":{"format":"pt"}}`, 0, nil},
		{"null metadata", `{"__metadata__":null}`, 0, nil},
		{"scalar", `{"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, 4, []string{"s"}},
		{"out of order", `{"b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]},"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}`, 4, []string{"a", "b"}},
		{"empty tensors", `{"e":{"dtype":"F32","shape":[0,5],"data_offsets":[2,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"z":{"dtype":"F64","shape":[0],"data_offsets":[3,3]}}`, 3, []string{"a", "e", "b", "z"}},
		{"packed F4", `{"q":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}`, 3, []string{"q"}},
		{"unknown key skipped", `{"q":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"note":{"x":[1]}}}`, 1, []string{"q"}},
		{"whitespace", " \n{ \"q\" : {\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]} }\t", 1, []string{"q"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, data, err := safetensors.Decode(file(c.header, c.data))
			if err != nil {
				t.Fatal(err)
			}
			if len(data) != c.data {
				t.Errorf("data section of %d bytes, want %d", len(data), c.data)
			}
			if got := h.Names(); strings.Join(got, ",") != strings.Join(c.names, ",") {
				t.Errorf("tensors in data order %v, want %v", got, c.names)
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	cases := []struct {
		d     safetensors.DType
		shape []int
		want  int64
	}{
		{safetensors.F64, []int{3}, 24}, {safetensors.F32, []int{2, 3}, 24}, {safetensors.F16, []int{5}, 10},
		{safetensors.BF16, []int{5}, 10}, {safetensors.I64, []int{1}, 8}, {safetensors.I32, []int{1}, 4},
		{safetensors.I16, []int{1}, 2}, {safetensors.I8, []int{1}, 1}, {safetensors.U8, []int{7}, 7},
		{safetensors.U16, []int{1}, 2}, {safetensors.U32, []int{1}, 4}, {safetensors.U64, []int{1}, 8},
		{safetensors.BOOL, []int{9}, 9}, {safetensors.F8_E4M3, []int{4}, 4}, {safetensors.F8_E5M2, []int{4}, 4},
		{safetensors.F8_E8M0, []int{4}, 4}, {safetensors.F6_E2M3, []int{4}, 3}, {safetensors.F6_E3M2, []int{8}, 6},
		{safetensors.F4, []int{2, 5}, 5}, {safetensors.C64, []int{2}, 16}, {safetensors.F32, []int{}, 4},
		{safetensors.F32, []int{0, 1 << 40}, 0},
	}
	for _, c := range cases {
		got, err := safetensors.ByteSize(c.d, c.shape)
		if err != nil || got != c.want {
			t.Errorf("ByteSize(%s, %v) = %d, %v; want %d", c.d, c.shape, got, err, c.want)
		}
	}
	if _, err := safetensors.ByteSize("X", []int{1}); err == nil {
		t.Error("sized an unknown dtype")
	}
}

// A length prefix over MaxHeader is refused without reading the header
// (the file is sparse: it costs no disk or memory).
func TestOpenHeaderOverLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.safetensors")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(binary.LittleEndian.AppendUint64(nil, safetensors.MaxHeader+1))
	if err := f.Truncate(safetensors.MaxHeader + 64); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = safetensors.Open(p)
	if err == nil || !strings.Contains(err.Error(), "over the limit") || !strings.Contains(err.Error(), p) {
		t.Errorf("error %v", err)
	}
}
