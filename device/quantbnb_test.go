package device

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// bnbOf lays a fixture case out as transformers saves a load_in_4bit
// weight of shape [rows, cols].
func bnbOf(t *testing.T, f *quantFixture, name string, rows, cols int) (BitsandbytesNF4, []float32) {
	t.Helper()
	for _, c := range f.Cases {
		if c.Name != name {
			continue
		}
		levels := make([]byte, 0, 64)
		for _, v := range f.NF4Levels {
			levels = append(levels, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		m := make([]byte, 0, 1024)
		for _, v := range f.DynamicMap {
			m = append(m, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		js := fmt.Sprintf(`{"quant_type": "nf4", "absmax": null, "blocksize": 64, "dtype": "bfloat16", "shape": [%d, %d], "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": %v}`,
			rows, cols, float64(math.Float32frombits(c.Offset)))
		return BitsandbytesNF4{Weight: unb64(t, c.Codes), Absmax: unb64(t, c.AbsmaxCodes), QuantMap: levels,
			NestedAbsmax: unb64(t, c.Nested), NestedQuantMap: m, QuantState: []byte(js)}, f32sOf(unb64(t, c.Values))
	}
	t.Fatalf("no fixture %s", name)
	return BitsandbytesNF4{}, nil
}

func TestBitsandbytesNF4LoadsExactly(t *testing.T) {
	f := loadQuantFixture(t)
	b, want := bnbOf(t, f, "nf4-nested-bf16", 263, 64)
	shape, p, err := b.Parts("model.layers.0.mlp.up_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	if len(shape) != 2 || shape[0] != 263 || shape[1] != 64 {
		t.Fatalf("shape %v", shape)
	}
	for i, w := range want {
		if g := p.Value(i); math.Float32bits(g) != math.Float32bits(w) {
			t.Fatalf("value %d = %v, bitsandbytes' definition gives %v", i, g, w)
		}
	}
	// Without double quantization (F32 absmaxes), the absmaxes are nested
	// here: values within the nested rounding of the F32 ones.
	a := unb64(t, f.Cases[1].Absmax)
	plain := b
	plain.Absmax, plain.NestedAbsmax, plain.NestedQuantMap = a, nil, nil
	if _, q, err := plain.Parts("w"); err != nil {
		t.Fatal(err)
	} else {
		for i, w := range want {
			if g := q.Value(i); math.Abs(float64(g-w)) > 0.02*math.Abs(float64(w))+1e-6 {
				t.Fatalf("value %d = %v, want about %v", i, g, w)
			}
		}
	}
}

func TestBitsandbytesNF4Refusals(t *testing.T) {
	f := loadQuantFixture(t)
	good, _ := bnbOf(t, f, "nf4-nested-bf16", 263, 64)
	for _, c := range []struct {
		name string
		edit func(b *BitsandbytesNF4)
		want string
	}{
		{"fp4", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"nf4"`, `"fp4"`, 1))
		}, `w.quant_state.bitsandbytes__nf4: quant_type "fp4"`},
		{"blocksize", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"blocksize": 64`, `"blocksize": 128`, 1))
		}, "blocksize 128"},
		{"short codes", func(b *BitsandbytesNF4) { b.Weight = b.Weight[1:] }, "w: 8415 bytes of packed codes for shape [263 64] (want 8416)"},
		{"absmax", func(b *BitsandbytesNF4) { b.Absmax = b.Absmax[:10] }, "w.absmax: 10 bytes"},
		{"nested", func(b *BitsandbytesNF4) { b.NestedAbsmax = b.NestedAbsmax[:4] }, "w.nested_absmax: 4 bytes"},
		{"map", func(b *BitsandbytesNF4) { b.NestedQuantMap = append([]byte{0, 0, 0xc0, 0x7f}, b.NestedQuantMap[4:]...) }, "w.nested_quant_map: value 0 is NaN"},
		{"json", func(b *BitsandbytesNF4) { b.QuantState = []byte("{") }, "w.quant_state.bitsandbytes__nf4: not the JSON"},
		{"huge shape", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"shape": [263, 64]`, `"shape": [1048576, 1048576]`, 1))
		}, "shape [1048576 1048576]"},
		{"zero dimension", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"shape": [263, 64]`, `"shape": [263, 0]`, 1))
		}, "shape [263 0]"},
		{"no shape", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"shape": [263, 64]`, `"shape": []`, 1))
		}, "no shape"},
		{"offset", func(b *BitsandbytesNF4) {
			b.QuantState = []byte(strings.Replace(string(b.QuantState), `"nested_offset"`, `"x"`, 1))
		}, "no finite nested_offset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := good
			c.edit(&b)
			_, _, err := b.Parts("w")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
