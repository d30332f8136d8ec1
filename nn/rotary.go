package nn

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// RopeScaling stretches rotary embeddings to contexts longer than a model
// was pretrained on (Hugging Face's rope_scaling). Type "" (or
// "default") is none. The others, as transformers' modeling_rope_utils
// computes them, in float32:
//
//   - "linear" divides every frequency by Factor (Gemma 3's global layers).
//
//   - "llama3" is Llama 3.1's rule: it divides the frequencies of long
//     wavelengths by Factor, keeps short ones, and blends linearly in
//     between:
//
//     wavelen = 2π / f
//     wavelen < OriginalContext/HighFreqFactor: f
//     wavelen > OriginalContext/LowFreqFactor:  f / Factor
//     otherwise, with s = (OriginalContext/wavelen - LowFreqFactor) / (HighFreqFactor - LowFreqFactor):
//     (1-s)·f/Factor + s·f
//
//   - "longrope" (Phi-3's, once called "su") divides frequency j by
//     ShortFactor[j] while a pass's sequence (its largest position plus
//     one) is at most OriginalContext, by LongFactor[j] beyond, and
//     multiplies cos and sin by AttentionFactor (0: √(1 + ln(Factor) /
//     ln(OriginalContext)) when Factor > 1, else 1, Factor being
//     max_position_embeddings / original_max_position_embeddings).
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64
	OriginalContext               int // original_max_position_embeddings
	ShortFactor, LongFactor       []float64
	AttentionFactor               float64
}

// RotaryConfig configures rotary position embeddings over heads of
// HeadDim elements, of which the first Dim rotate (Dim even; 0: all of
// them; fewer under Phi's partial_rotary_factor, the rest passing
// through unchanged).
type RotaryConfig struct {
	HeadDim int
	Dim     int
	Theta   float64 // the base of the frequencies (rope_theta; Llama 2: 10000, Llama 3: 500000)
	Scaling RopeScaling
}

// Rotary applies rotary position embeddings (RoPE) in Hugging Face's
// "rotate_half" layout, the one Llama checkpoints' q_proj and k_proj are
// stored for: element j of the rotated part's first half is paired with
// element j of its second half (not with its neighbour, as the original
// paper's interleaved layout does), and the pair at position p is rotated
// by the angle p·f_j:
//
//	out = x·cos + rotate_half(x)·sin,  rotate_half(x) = concat(-x₂, x₁)
//
// with cos and sin [T, Dim] repeating the Dim/2 angles twice (scaled by
// longrope's attention factor). Elements past Dim pass through. It has
// no parameters: the frequencies are fixed at construction.
type Rotary struct {
	HeadDim int
	Dim     int // rotated elements of a head
	// invFreq are the frequencies f_j = Theta^(-2j/Dim) (scaled),
	// rounded to float32 as Hugging Face computes them.
	invFreq []float32
	// long is the rotary of passes longer than original (longrope), nil
	// for every other scaling.
	long     *Rotary
	original int
	// attn multiplies cos and sin (longrope's attention factor; 1).
	attn float64
}

// NewRotary computes the frequencies of c.
func NewRotary(c RotaryConfig) (*Rotary, error) {
	if c.HeadDim < 2 || c.HeadDim%2 != 0 && c.Dim == 0 {
		return nil, fmt.Errorf("nn: rotary: HeadDim %d must be even and at least 2", c.HeadDim)
	}
	dim := c.Dim
	if dim == 0 {
		dim = c.HeadDim
	}
	if dim < 2 || dim%2 != 0 || dim > c.HeadDim {
		return nil, fmt.Errorf("nn: rotary: Dim %d must be even, at least 2 and at most HeadDim %d", c.Dim, c.HeadDim)
	}
	if !(c.Theta > 1) || math.IsInf(c.Theta, 0) {
		return nil, fmt.Errorf("nn: rotary: Theta %v must be a finite base > 1", c.Theta)
	}
	half := dim / 2
	pow := make([]float32, half) // Theta^(2j/Dim), as torch's float32 power gives it
	inv := make([]float32, half)
	for j := range inv {
		// HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
		e := float32(2*j) / float32(dim)
		pow[j] = float32(math.Pow(c.Theta, float64(e)))
		inv[j] = float32(1 / float64(pow[j]))
	}
	p := &Rotary{HeadDim: c.HeadDim, Dim: dim, invFreq: inv, attn: 1}
	switch s := c.Scaling; s.Type {
	case "", "default":
	case "linear":
		if !(s.Factor >= 1) || math.IsInf(s.Factor, 0) {
			return nil, fmt.Errorf("nn: rotary: linear scaling factor %v: want a finite factor >= 1", s.Factor)
		}
		for j, f := range inv {
			inv[j] = float32(float64(f) / s.Factor)
		}
	case "llama3":
		if !(s.Factor >= 1) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalContext < 1 {
			return nil, fmt.Errorf("nn: rotary: llama3 scaling %+v: want factor >= 1, 0 < low_freq_factor < high_freq_factor, original_max_position_embeddings >= 1", s)
		}
		old := float64(s.OriginalContext)
		lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
		for j, f32 := range inv {
			f := float64(f32)
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave:
				// High frequencies (short wavelengths) stay.
			case wave > lowWave:
				inv[j] = float32(f / s.Factor)
			default:
				sm := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				inv[j] = float32((1-sm)*f/s.Factor + sm*f)
			}
		}
	case "longrope", "su":
		if len(s.ShortFactor) != half || len(s.LongFactor) != half {
			return nil, fmt.Errorf("nn: rotary: longrope scaling has %d short and %d long factors, want %d each (half the rotated dimensions)", len(s.ShortFactor), len(s.LongFactor), half)
		}
		if s.OriginalContext < 2 {
			return nil, fmt.Errorf("nn: rotary: longrope scaling: original_max_position_embeddings %d, want at least 2", s.OriginalContext)
		}
		for j := range half {
			for _, f := range []float64{s.ShortFactor[j], s.LongFactor[j]} {
				if !(f > 0) || math.IsInf(f, 0) {
					return nil, fmt.Errorf("nn: rotary: longrope factor %v: want finite factors above 0", f)
				}
			}
		}
		attn := s.AttentionFactor
		switch {
		case attn < 0 || math.IsInf(attn, 0) || math.IsNaN(attn):
			return nil, fmt.Errorf("nn: rotary: longrope attention_factor %v: want a finite number above 0", attn)
		case attn == 0 && s.Factor > 1:
			attn = math.Sqrt(1 + math.Log(s.Factor)/math.Log(float64(s.OriginalContext)))
		case attn == 0:
			attn = 1
		}
		scaled := func(ext []float64) []float32 {
			out := make([]float32, half)
			for j := range out {
				// HF: 1.0 / (ext_factors * base**inv_freq_shape), in float32.
				out[j] = float32(1 / float64(float32(ext[j])*pow[j]))
			}
			return out
		}
		p.invFreq, p.original, p.attn = scaled(s.ShortFactor), s.OriginalContext, attn
		p.long = &Rotary{HeadDim: c.HeadDim, Dim: dim, invFreq: scaled(s.LongFactor), attn: attn}
	default:
		return nil, fmt.Errorf("nn: rotary: rope scaling type %q (memfit knows linear, llama3 and longrope)", s.Type)
	}
	return p, nil
}

// For returns the rotary of a pass whose sequence is seqLen long (its
// largest position plus one): longrope's long frequencies past its
// original context, p itself otherwise (and for every other scaling).
// Hugging Face decides so for each forward.
func (p *Rotary) For(seqLen int) *Rotary {
	if p.long != nil && seqLen > p.original {
		return p.long
	}
	return p
}

// SwitchesAt is the sequence length from which For gives other
// frequencies than for shorter ones (longrope's original context plus
// one), or 0 when it never does: keys a KV cache holds were rotated for
// the length at which they were made, so a cache that grows past it must
// be filled again.
func (p *Rotary) SwitchesAt() int {
	if p.long == nil {
		return 0
	}
	return p.original + 1
}

// InvFreq returns a copy of the (scaled) frequencies f_j.
func (p *Rotary) InvFreq() []float32 { return append([]float32(nil), p.invFreq...) }

// Tables returns cos and sin [T, Dim] for positions pos..pos+T-1 in
// row-major order. The angle is the float32 product of position and
// frequency, as Hugging Face forms it; cos and sin are then exact to
// float64. The slices may be shared with later calls: read them only.
func (p *Rotary) Tables(pos, t int) (cos, sin []float64) {
	return p.tables(t, func(i int) int { return pos + i })
}

// TablesAt returns cos and sin [len(positions), Dim] for the given
// positions, row by row, as Tables computes them: a position gives the
// same row whichever way it is asked for.
func (p *Rotary) TablesAt(positions []int32) (cos, sin []float64) {
	return p.tables(len(positions), func(i int) int { return int(positions[i]) })
}

// tableCache keeps the tables made last: every block of a model asks for
// the same ones (the same frequencies, the step's positions), each in its
// forward and again in a checkpointed recomputation, and a long
// context's are T·HeadDim cosines and sines each time. A tiled block asks
// for one set per tile of rows, the tiles in turn in every block, so the
// cache holds several sets, the most recently used first, up to
// tableCacheBytes (always the last one). Callers only read the tables
// (table copies them to the device).
var tableCache struct {
	sync.Mutex
	entries []*tableEntry
	bytes   int
}

// tableEntry is one set of tables: the frequencies and the rows'
// positions they were made for.
type tableEntry struct {
	freq      []float32
	attn      float64
	positions []int32
	cos, sin  []float64
}

// tableCacheBytes bounds the cached tables: 64 MiB holds eight tiles of
// 4,096 rows of 128-element heads.
const tableCacheBytes = 64 << 20

// tablesComputed counts the tables compute made (for tests).
var tablesComputed int

// tables returns cos and sin for t rows, row i at position at(i).
func (p *Rotary) tables(t int, at func(i int) int) (cos, sin []float64) {
	c := &tableCache
	c.Lock()
	defer c.Unlock()
	for i, e := range c.entries {
		if !slices.Equal(e.freq, p.invFreq) || e.attn != p.attn || len(e.positions) != t {
			continue
		}
		same := true
		for j := 0; same && j < t; j++ {
			same = int(e.positions[j]) == at(j)
		}
		if same {
			copy(c.entries[1:i+1], c.entries[:i])
			c.entries[0] = e
			return e.cos, e.sin
		}
	}
	cos, sin = p.compute(t, at)
	tablesComputed++
	e := &tableEntry{freq: slices.Clone(p.invFreq), attn: p.attn, positions: make([]int32, t), cos: cos, sin: sin}
	for i := range t {
		e.positions[i] = int32(at(i))
	}
	c.entries = append([]*tableEntry{e}, c.entries...)
	c.bytes += e.size()
	for len(c.entries) > 1 && c.bytes > tableCacheBytes {
		last := c.entries[len(c.entries)-1]
		c.entries = c.entries[:len(c.entries)-1]
		c.bytes -= last.size()
	}
	return cos, sin
}

// size is the bytes e holds.
func (e *tableEntry) size() int { return 8*(len(e.cos)+len(e.sin)) + 4*(len(e.positions)+len(e.freq)) }

// compute makes tables' cos and sin, [t, Dim].
func (p *Rotary) compute(t int, at func(i int) int) (cos, sin []float64) {
	d, half := p.Dim, p.Dim/2
	cos, sin = make([]float64, t*d), make([]float64, t*d)
	for i := range t {
		pos := float32(at(i))
		for j, f := range p.invFreq {
			a := float64(pos * f)
			c, s := math.Cos(a)*p.attn, math.Sin(a)*p.attn
			cos[i*d+j], cos[i*d+half+j] = c, c
			sin[i*d+j], sin[i*d+half+j] = s, s
		}
	}
	return cos, sin
}

// Apply rotates x [..., T, HeadDim] whose T rows are the positions
// pos..pos+T-1 (pos > 0 for tokens after a KV cache's), with the
// frequencies of a pass of pos+T tokens (For). cos and sin are made on
// x's device in x's dtype (as Hugging Face casts them to the query's),
// so the result is x's dtype. It is composed of Narrow, Neg, Concat, Mul
// and Add: the gradient is theirs.
func (p *Rotary) Apply(r *Run, x *tensor.Tensor, pos int) *tensor.Tensor {
	n := x.Dim()
	if n < 2 || x.Shape()[n-1] != p.HeadDim || pos < 0 {
		panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("input %v must be [..., time, %d] (at position %d)", x, p.HeadDim, pos)})
	}
	t := x.Shape()[n-2]
	q := p.For(pos + t)
	var cv, sv []float64
	if device.StoresValues(x.Device()) {
		// A planning device needs the tables' bytes, not their values.
		cv, sv = q.Tables(pos, t)
	}
	shape := []int{t, p.Dim}
	cos, sin := table(x, shape, cv), table(x, shape, sv)
	defer cos.Release()
	defer sin.Release()
	return p.rotate(r, x, cos, sin)
}

// ApplyPositions rotates x [B, ..., T, HeadDim] whose tokens are at the
// given positions (B·T of them, row by row: a packed batch's, which
// restart at 0 where each example begins; tensor.Segments.Positions),
// with the frequencies of a pass as long as the largest position plus
// one. cos and sin are [B, 1, …, T, Dim], broadcast over the dimensions
// between (the heads). Values and gradient are Apply's for each row's
// own positions.
func (p *Rotary) ApplyPositions(r *Run, x *tensor.Tensor, positions []int32) *tensor.Tensor {
	cos, sin := p.positionTables(x, positions, 0)
	defer cos.Release()
	defer sin.Release()
	return p.rotate(r, x, cos, sin)
}

// positionTables returns ApplyPositions' cos and sin for x, which
// queries and keys of different head counts share, for a pass of
// seqLen tokens (0: the largest position plus one).
func (p *Rotary) positionTables(x *tensor.Tensor, positions []int32, seqLen int) (cos, sin *tensor.Tensor) {
	n := x.Dim()
	if n < 3 || x.Shape()[n-1] != p.HeadDim || len(positions) != x.Shape()[0]*x.Shape()[n-2] {
		panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("input %v must be [batch, ..., time, %d] with a position for each of its batch·time tokens (%d given)", x, p.HeadDim, len(positions))})
	}
	longest := int32(-1)
	for i, q := range positions {
		if q < 0 {
			panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("position %d of %v is %d, want >= 0", i, x, q)})
		}
		longest = max(longest, q)
	}
	if seqLen == 0 {
		seqLen = int(longest) + 1
	}
	shape := make([]int, n)
	for i := range shape {
		shape[i] = 1
	}
	shape[0], shape[n-2], shape[n-1] = x.Shape()[0], x.Shape()[n-2], p.Dim
	var cv, sv []float64
	if device.StoresValues(x.Device()) {
		cv, sv = p.For(seqLen).TablesAt(positions)
	}
	return table(x, shape, cv), table(x, shape, sv)
}

// table makes a cos or sin table of shape on x's device in x's dtype.
func table(x *tensor.Tensor, shape []int, v []float64) *tensor.Tensor {
	c, err := tensor.New(x.Device(), x.DType(), shape, memory.Activation)
	if err == nil && v != nil {
		err = c.SetFloat64s(v)
	}
	if err != nil {
		panic(err)
	}
	return c
}

// rotate is x·cos + rotate_half(x)·sin over x's first Dim elements,
// the rest passing through (partial rotary embeddings: Phi's
// cat(rotated, passed)).
func (p *Rotary) rotate(r *Run, x, cos, sin *tensor.Tensor) *tensor.Tensor {
	n := x.Dim()
	if p.Dim < p.HeadDim {
		xr := r.Narrow(x, n-1, 0, p.Dim)
		xp := r.Narrow(x, n-1, p.Dim, p.HeadDim-p.Dim)
		rot := p.rotateAll(r, xr, cos, sin)
		xr.Release()
		out := r.Concat(n-1, rot, xp)
		rot.Release()
		xp.Release()
		return out
	}
	return p.rotateAll(r, x, cos, sin)
}

// rotateAll is rotate of x whose every element rotates.
func (p *Rotary) rotateAll(r *Run, x, cos, sin *tensor.Tensor) *tensor.Tensor {
	n, half := x.Dim(), p.Dim/2
	x1 := r.Narrow(x, n-1, 0, half)
	x2 := r.Narrow(x, n-1, half, half)
	n2 := r.Neg(x2)
	x2.Release()
	rot := r.Concat(n-1, n2, x1)
	n2.Release()
	x1.Release()
	a := r.Mul(x, cos)
	b := r.Mul(rot, sin)
	rot.Release()
	out := r.Add(a, b)
	a.Release()
	b.Release()
	return out
}
