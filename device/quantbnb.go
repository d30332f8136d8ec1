package device

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// BitsandbytesNF4 is one weight W of a checkpoint in bitsandbytes' 4-bit
// layout, as transformers saves a `load_in_4bit` model
// (Linear4bit._save_to_state_dict writes QuantState.as_dict(packed=True)
// beside the weight): the raw little-endian bytes of each safetensors
// entry, whatever its declared dtype (bitsandbytes' quant_storage may
// declare the packed codes as another type of the same bytes).
type BitsandbytesNF4 struct {
	Weight         []byte // W.weight: ⌈n/2⌉ packed codes, element 2i in the high nibble of byte i
	Absmax         []byte // W.weight.absmax: U8 codes (nested) or F32 absmaxes, one per block
	QuantMap       []byte // W.weight.quant_map: 16 F32 levels
	NestedAbsmax   []byte // W.weight.nested_absmax: F32, one per 256 blocks (nil: not nested)
	NestedQuantMap []byte // W.weight.nested_quant_map: 256 F32
	QuantState     []byte // W.weight.quant_state.bitsandbytes__nf4: JSON
}

// bnbQuantState is the JSON bitsandbytes packs (pack_dict_to_tensor).
type bnbQuantState struct {
	QuantType       string   `json:"quant_type"`
	Blocksize       int      `json:"blocksize"`
	DType           string   `json:"dtype"`
	Shape           []int    `json:"shape"`
	NestedBlocksize int      `json:"nested_blocksize"`
	NestedDType     string   `json:"nested_dtype"`
	NestedOffset    *float64 `json:"nested_offset"`
}

// Parts checks b and returns the weight's shape and its NF4 content, the
// codes and tables as stored (Codes aliases b.Weight): a
// double-quantized checkpoint loads bit for bit, with no 16-bit copy. A
// checkpoint without double quantization (bnb_4bit_use_double_quant
// off: F32 absmaxes) has its absmaxes double-quantized here, which
// changes each block's scale by the 8-bit rounding of its absmax (what
// QLoRA's double quantization costs). name prefixes errors (the weight's
// key).
func (b BitsandbytesNF4) Parts(name string) ([]int, NF4Parts, error) {
	fail := func(key, format string, args ...any) ([]int, NF4Parts, error) {
		return nil, NF4Parts{}, fmt.Errorf("%s%s: %s", name, key, fmt.Sprintf(format, args...))
	}
	var qs bnbQuantState
	if err := json.Unmarshal(b.QuantState, &qs); err != nil {
		return fail(".quant_state.bitsandbytes__nf4", "not the JSON bitsandbytes packs: %v", err)
	}
	switch {
	case qs.QuantType != "nf4":
		return fail(".quant_state.bitsandbytes__nf4", "quant_type %q; memfit stores nf4 only", qs.QuantType)
	case qs.Blocksize != QuantBlock:
		return fail(".quant_state.bitsandbytes__nf4", "blocksize %d; memfit's NF4 has blocks of %d", qs.Blocksize, QuantBlock)
	case len(qs.Shape) == 0:
		return fail(".quant_state.bitsandbytes__nf4", "no shape")
	}
	n := 1
	for _, d := range qs.Shape {
		if d <= 0 || n > math.MaxInt32/d {
			return fail(".quant_state.bitsandbytes__nf4", "shape %v", qs.Shape)
		}
		n *= d
	}
	l := NF4LayoutOf(n)
	if len(b.Weight) != (n+1)/2 {
		return fail("", "%d bytes of packed codes for shape %v (want %d)", len(b.Weight), qs.Shape, (n+1)/2)
	}
	levels, err := f32Table(b.QuantMap, 16)
	if err != nil {
		return fail(".quant_map", "%v", err)
	}
	p := NF4Parts{Codes: b.Weight, AbsmaxCodes: make([]byte, l.Blocks), Nested: make([]float32, l.Nested)}
	copy(p.Levels[:], levels)
	if b.NestedAbsmax == nil {
		// Not nested: F32 absmaxes, double-quantized with the map memfit
		// quantizes with.
		a, err := f32Table(b.Absmax, l.Blocks)
		if err != nil {
			return fail(".absmax", "%v", err)
		}
		p.Map = dynamicMap
		p.Offset = NF4Nest(p.AbsmaxCodes, p.Nested, a, &p.Map)
		return qs.Shape, p, nil
	}
	switch {
	case qs.NestedBlocksize != NF4NestedBlock:
		return fail(".quant_state.bitsandbytes__nf4", "nested_blocksize %d; memfit's NF4 nests %d absmaxes", qs.NestedBlocksize, NF4NestedBlock)
	case qs.NestedOffset == nil || math.IsNaN(*qs.NestedOffset) || math.IsInf(*qs.NestedOffset, 0):
		return fail(".quant_state.bitsandbytes__nf4", "no finite nested_offset")
	case len(b.Absmax) != l.Blocks:
		return fail(".absmax", "%d bytes; %d blocks of %d elements need one code each", len(b.Absmax), l.Blocks, QuantBlock)
	}
	m, err := f32Table(b.NestedQuantMap, 256)
	if err != nil {
		return fail(".nested_quant_map", "%v", err)
	}
	copy(p.Map[:], m)
	nested, err := f32Table(b.NestedAbsmax, l.Nested)
	if err != nil {
		return fail(".nested_absmax", "%v", err)
	}
	copy(p.Nested, nested)
	copy(p.AbsmaxCodes, b.Absmax)
	// bitsandbytes keeps the offset as an F32 tensor and writes its
	// .item(), so the JSON number is an F32 value exactly.
	p.Offset = float32(*qs.NestedOffset)
	return qs.Shape, p, nil
}

// f32Table decodes n little-endian F32 values, all finite.
func f32Table(b []byte, n int) ([]float32, error) {
	if len(b) != 4*n {
		return nil, fmt.Errorf("%d bytes, want %d F32 values (%d bytes)", len(b), n, 4*n)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if math.IsNaN(float64(v[i])) || math.IsInf(float64(v[i]), 0) {
			return nil, fmt.Errorf("value %d is %v", i, v[i])
		}
	}
	return v, nil
}
