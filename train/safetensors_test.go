package train

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

func TestSafetensorsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	in := map[string]Tensor{
		"blocks.0.attn.qkv.weight": {Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}},
		"final_norm.bias":          {Shape: []int{2}, Data: []float32{-1.5, 0}},
		"scalar":                   {Shape: []int{}, Data: []float32{7}},
	}
	meta := map[string]string{"format": "memfit", "step": "12"}
	if err := WriteSafetensors(path, in, meta); err != nil {
		t.Fatal(err)
	}
	out, gotMeta, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) || !reflect.DeepEqual(gotMeta, meta) {
		t.Errorf("round trip:\n%v %v\nwant\n%v %v", out, gotMeta, in, meta)
	}
	// The header length is a multiple of 8, as the format recommends.
	b, _ := os.ReadFile(path)
	if binary.LittleEndian.Uint64(b)%8 != 0 {
		t.Errorf("header length %d not 8-aligned", binary.LittleEndian.Uint64(b))
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	if len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}

func TestSafetensorsCorrupt(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := WriteSafetensors(good, map[string]Tensor{"w": {Shape: []int{4}, Data: []float32{1, 2, 3, 4}}}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	hlen := binary.LittleEndian.Uint64(b)
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short for a header"},
		{"huge header length", append(binary.LittleEndian.AppendUint64(nil, 1<<40), b[8:]...), "does not fit"},
		{"truncated data", b[:len(b)-4], "do not fit"},
		{"header not json", append(append([]byte{}, b[:8]...), []byte(strings.Repeat("x", int(hlen)))...), "not JSON"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		os.WriteFile(p, c.data, 0o644)
		_, _, err := ReadSafetensors(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) && c.name != "empty" {
			t.Errorf("%s: error %v, want one naming the file and containing %q", c.name, err, c.want)
		}
	}
}

// TestSafetensorsTiling: tensors' byte ranges must tile the data section,
// as the format requires; an overlap or a hole is refused naming the
// tensors on both sides of it.
func TestSafetensorsTiling(t *testing.T) {
	dir := t.TempDir()
	entry := func(start, n int64) safetensors.Entry {
		return safetensors.Entry{DType: safetensors.F32, Shape: []int{int(n)}, Offsets: [2]int64{4 * start, 4 * (start + n)}}
	}
	cases := []struct {
		name    string
		tensors map[string]safetensors.Entry
		data    int64 // bytes
		want    []string
	}{
		{"tiled", map[string]safetensors.Entry{"a": entry(0, 2), "b": entry(2, 3), "empty": entry(5, 0)}, 20, nil},
		{"overlap", map[string]safetensors.Entry{"a": entry(0, 2), "b": entry(1, 3)}, 16, []string{"a [0 8] and b [4 16] overlap"}},
		{"same range", map[string]safetensors.Entry{"a": entry(0, 2), "b": entry(0, 2)}, 8, []string{"a [0 8] and b [0 8] overlap"}},
		{"hole", map[string]safetensors.Entry{"a": entry(0, 2), "b": entry(3, 1)}, 16, []string{"a [0 8] and b [12 16] leave data bytes [8 12]"}},
		{"hole at the start", map[string]safetensors.Entry{"a": entry(1, 1)}, 8, []string{"a [4 8] is the first", "[0 4]"}},
		{"bytes after the last", map[string]safetensors.Entry{"a": entry(0, 1)}, 8, []string{"a [0 4] is the last", "holds 8 bytes"}},
		{"data without tensors", nil, 8, []string{"8 data bytes but no tensors"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := safetensors.EncodeHeader(c.tensors, nil)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, make([]byte, c.data)...)
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err = ReadSafetensors(p)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(c.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
