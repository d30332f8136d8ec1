package device

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/x448/float16"

	"github.com/memfit/memfit/internal/plantrace"
	"github.com/memfit/memfit/memory"
)

// quantFixture is device/testdata/quant.json, written by
// scripts/quant_fixtures.py from a PyTorch implementation of the
// definitions.
type quantFixture struct {
	Torch      string   `json:"torch"`
	NF4Levels  []uint32 `json:"nf4_levels"`
	DynamicMap []uint32 `json:"dynamic_map"`
	Cases      []struct {
		Name, Format, DType string
		N                   int
		X                   string
		Codes               string
		Absmax              string
		AbsmaxCodes         string `json:"absmax_codes"`
		Nested              string
		Offset              uint32
		Values              string
		ValuesBF16          string `json:"values_bf16"`
		ValuesF16           string `json:"values_f16"`
	}
}

func loadQuantFixture(t *testing.T) *quantFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/quant.json")
	if err != nil {
		t.Fatal(err)
	}
	var f quantFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func f32sOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func TestQuantTablesMatchReference(t *testing.T) {
	f := loadQuantFixture(t)
	for i, v := range nf4Levels {
		if math.Float32bits(v) != f.NF4Levels[i] {
			t.Errorf("NF4 level %d: %v, reference %v", i, v, math.Float32frombits(f.NF4Levels[i]))
		}
	}
	for i, v := range dynamicMap {
		if math.Float32bits(v) != f.DynamicMap[i] {
			t.Errorf("dynamic map %d: %v (%#x), reference %v (%#x, PyTorch %s)", i, v, math.Float32bits(v), math.Float32frombits(f.DynamicMap[i]), f.DynamicMap[i], f.Torch)
		}
	}
}

// TestQuantizeMatchesReference quantizes each fixture's input and
// compares every code, scale and dequantized value with the reference,
// bit for bit, as well as the values rounded to BF16 and F16.
func TestQuantizeMatchesReference(t *testing.T) {
	f := loadQuantFixture(t)
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			raw := unb64(t, c.X)
			x := make([]float32, c.N)
			getValues(x, map[string]DType{"f32": F32, "bf16": BF16, "f16": F16}[c.DType], raw)
			want := f32sOf(unb64(t, c.Values))
			got := make([]float32, c.N)
			switch c.Format {
			case "nf4":
				p, err := QuantizeNF4(x)
				if err != nil {
					t.Fatal(err)
				}
				equalBytes(t, "codes", p.Codes, unb64(t, c.Codes))
				equalBytes(t, "absmax codes", p.AbsmaxCodes, unb64(t, c.AbsmaxCodes))
				equalBytes(t, "nested absmax", f32Bytes(p.Nested), unb64(t, c.Nested))
				if math.Float32bits(p.Offset) != c.Offset {
					t.Errorf("offset %v, reference %v", p.Offset, math.Float32frombits(c.Offset))
				}
				// The block absmaxes before nesting.
				a := make([]float32, NF4LayoutOf(c.N).Blocks)
				codes := make([]byte, (c.N+1)/2)
				if err := NF4Encode(codes, a, x, true); err != nil {
					t.Fatal(err)
				}
				equalBytes(t, "absmax", f32Bytes(a), unb64(t, c.Absmax))
				for i := range got {
					got[i] = p.Value(i)
				}
			case "int8":
				p, err := QuantizeInt8(x)
				if err != nil {
					t.Fatal(err)
				}
				equalBytes(t, "codes", unsafeBytes(p.Codes), unb64(t, c.Codes))
				equalBytes(t, "absmax", f32Bytes(p.Absmax), unb64(t, c.Absmax))
				for i := range got {
					got[i] = p.Value(i)
				}
			}
			equalBytes(t, "values", f32Bytes(got), f32Bytes(want))
			if c.ValuesBF16 != "" {
				equalBytes(t, "values in bf16", putValues(make([]byte, 2*c.N), BF16, got), unb64(t, c.ValuesBF16))
				equalBytes(t, "values in f16", putValues(make([]byte, 2*c.N), F16, got), unb64(t, c.ValuesF16))
			}
		})
	}
}

func equalBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d bytes, reference %d", what, len(got), len(want))
		return
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] {
			if bad < 5 {
				t.Errorf("%s: byte %d is %#02x, reference %#02x", what, i, got[i], want[i])
			}
			bad++
		}
	}
	t.Errorf("%s: %d of %d bytes differ", what, bad, len(got))
}

// TestQuantBytes holds the storage sizes to their formulas: the planner's
// accounting of a quantized weight is exact because these are.
func TestQuantBytes(t *testing.T) {
	for _, c := range []struct {
		dt   DType
		n    int
		want int64
	}{
		{NF4, 0, 1092},
		{NF4, 1, 1092 + 4 + 1 + 1},
		{NF4, 64, 1092 + 4 + 1 + 32},
		{NF4, 65, 1092 + 4 + 2 + 33},
		{NF4, 64 * 256, 1092 + 4 + 256 + 8192},
		{NF4, 64*256 + 1, 1092 + 8 + 257 + 8193},
		{NF4, 4096 * 14336, 1092 + 4*3584 + 917504 + 29360128},
		{Int8, 0, 0},
		{Int8, 1, 4 + 1},
		{Int8, 64, 4 + 64},
		{Int8, 4096 * 14336, 4*917504 + 58720256},
		{BF16, 10, 20},
	} {
		if got := Bytes(c.dt, c.n); got != c.want {
			t.Errorf("Bytes(%v, %d) = %d, want %d", c.dt, c.n, got, c.want)
		}
	}
	// Bytes per element at scale: 4.127 bits for NF4 (4 + 8/64 + 32/16384),
	// 8.5 for Int8 (8 + 32/64).
	n := 64 * 256 * 1000
	for _, c := range []struct {
		dt   DType
		want float64
	}{{NF4, 0.5 + 1.0/64 + 4.0/(64*256)}, {Int8, 1 + 4.0/64}} {
		if got := float64(Bytes(c.dt, n)-map[DType]int64{NF4: 1092}[c.dt]) / float64(n); got != c.want {
			t.Errorf("%v: %v bytes per element, want %v", c.dt, got, c.want)
		}
	}
}

func TestQuantizeRefusesNonFinite(t *testing.T) {
	x := make([]float32, 200)
	x[130] = float32(math.Inf(1))
	if _, err := QuantizeNF4(x); err == nil || err.(*NonFiniteError).Index != 130 {
		t.Errorf("NF4: %v, want element 130", err)
	}
	x[130], x[3] = 0, float32(math.NaN())
	if _, err := QuantizeInt8(x); err == nil || err.(*NonFiniteError).Index != 3 {
		t.Errorf("Int8: %v, want element 3", err)
	}
}

func TestParseQuantDTypes(t *testing.T) {
	for _, d := range []DType{NF4, Int8} {
		if got, err := ParseDType(d.String()); err != nil || got != d || !d.IsQuantized() || d.IsFloat() || d.Size() != 0 {
			t.Errorf("%v: parsed %v, %v", d, got, err)
		}
	}
}

// f16 keeps the float16 import honest (putValues' F16 path is compared
// above only where the fixture has 16-bit values).
var _ = float16.Fromfloat32

// BenchmarkQuantize is the host definition's speed (what a load does per
// tensor, on each of its goroutines).
func BenchmarkQuantize(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.02) // random, as a weight's codes are
	}
	b.Run("nf4", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			if _, err := QuantizeNF4(x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("int8", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			if _, err := QuantizeInt8(x); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestQuantizeInPartsIsSerial: a long tensor, encoded in parts on several
// goroutines, gets the serial encoding's bytes, and a non-finite element
// in a later part is reported at its own index.
func TestQuantizeInPartsIsSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	x := make([]float32, 1<<20+37)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	p, err := QuantizeNF4(x)
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]byte, (len(x)+1)/2)
	a := make([]float32, NF4LayoutOf(len(x)).Blocks)
	if err := NF4Encode(codes, a, x, true); err != nil {
		t.Fatal(err)
	}
	equalBytes(t, "codes", p.Codes, codes)
	q := make([]byte, len(a))
	nested := make([]float32, NF4LayoutOf(len(x)).Nested)
	m := dynamicMap
	if off := NF4Nest(q, nested, a, &m); off != p.Offset {
		t.Errorf("offset %v, serially %v", p.Offset, off)
	}
	equalBytes(t, "absmax codes", p.AbsmaxCodes, q)
	i8, err := QuantizeInt8(x)
	if err != nil {
		t.Fatal(err)
	}
	c8 := make([]int8, len(x))
	a8 := make([]float32, Int8LayoutOf(len(x)).Blocks)
	_ = Int8Encode(c8, a8, x)
	equalBytes(t, "int8 codes", unsafeBytes(i8.Codes), unsafeBytes(c8))
	x[len(x)-5] = float32(math.NaN())
	for _, f := range []func() error{
		func() error { _, err := QuantizeNF4(x); return err },
		func() error { _, err := QuantizeInt8(x); return err },
	} {
		if err := f(); err == nil || err.(*NonFiniteError).Index != len(x)-5 {
			t.Errorf("%v, want element %d", err, len(x)-5)
		}
	}
}

// tileCounter is a device that counts the composed product's calls: its
// Alloc gives empty buffers, its Gemm and Dequantize record the columns
// they cover. It stores values as far as StoresValues can tell;
// storelessCounter is it marked Storeless.
type tileCounter struct {
	Device
	cols  [][2]int // each Dequantize's columns of op(B) (rows of B under TransB)
	gemms int
}

func (d *tileCounter) Alloc(int64, memory.Category) (Buffer, error) { return Buffer{}, nil }
func (d *tileCounter) Free(Buffer)                                  {}
func (d *tileCounter) Gemm(Gemm)                                    { d.gemms++ }
func (d *tileCounter) Dequantize(_, _ View, r0, r1, _, _ int) {
	d.cols = append(d.cols, [2]int{r0, r1})
}

type storelessCounter struct{ *tileCounter }

func (storelessCounter) Storeless() {}

// TestComposedQuantGemmPlansTwoTiles: on a device that stores no values
// (a plan) the composed product runs its first and last tiles, the last
// as narrow as it is, and skips those between, which allocate nothing;
// on one that stores values, or with plantrace.Every, it runs them all.
func TestComposedQuantGemmPlansTwoTiles(t *testing.T) {
	k, n := 1<<12, 5000 // tiles of QuantTileElems/k = 1024 columns: 4 whole and one of 904
	g := Gemm{Batch: 1, M: 3, N: n, K: k, TransB: true, LDA: k, LDB: k, LDC: n, Alpha: 1,
		A: View{DType: F32, Shape: []int{3, k}}, B: View{DType: NF4, Shape: []int{n, k}}, C: View{DType: F32, Shape: []int{3, n}}}
	all := [][2]int{{0, 1024}, {1024, 2048}, {2048, 3072}, {3072, 4096}, {4096, 5000}}
	for _, tc := range []struct {
		name  string
		plan  bool
		every bool
		want  [][2]int
	}{
		{"values", false, false, all},
		{"plan", true, false, [][2]int{{0, 1024}, {4096, 5000}}},
		{"plan tracing every tile", true, true, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer plantrace.SetEvery(tc.every)()
			c := &tileCounter{}
			var d Device = c
			if tc.plan {
				d = storelessCounter{c}
			}
			composedQuantGemm(d, g)
			if !slices.Equal(c.cols, tc.want) || c.gemms != len(tc.want) {
				t.Errorf("dequantized %v in %d products, want %v", c.cols, c.gemms, tc.want)
			}
		})
	}
}
