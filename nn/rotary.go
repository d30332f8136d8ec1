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
// was pretrained on. Type "" (or "default") is none; "llama3" is Llama
// 3.1's rule (Hugging Face's rope_type "llama3"), which divides the
// frequencies of long wavelengths by Factor, keeps short ones, and blends
// linearly in between:
//
//	wavelen = 2π / f
//	wavelen < OriginalContext/HighFreqFactor: f
//	wavelen > OriginalContext/LowFreqFactor:  f / Factor
//	otherwise, with s = (OriginalContext/wavelen - LowFreqFactor) / (HighFreqFactor - LowFreqFactor):
//	                                          (1-s)·f/Factor + s·f
//
// (Hugging Face's _compute_llama3_parameters; its attention factor is 1,
// so cos and sin are not rescaled.)
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64
	OriginalContext               int // original_max_position_embeddings
}

// RotaryConfig configures rotary position embeddings over heads of
// HeadDim (even) elements.
type RotaryConfig struct {
	HeadDim int
	Theta   float64 // the base of the frequencies (rope_theta; Llama 2: 10000, Llama 3: 500000)
	Scaling RopeScaling
}

// Rotary applies rotary position embeddings (RoPE) in Hugging Face's
// "rotate_half" layout, the one Llama checkpoints' q_proj and k_proj are
// stored for: element j of a head's first half is paired with element j
// of its second half (not with its neighbour, as the original paper's
// interleaved layout does), and the pair at position p is rotated by the
// angle p·f_j:
//
//	out = x·cos + rotate_half(x)·sin,  rotate_half(x) = concat(-x₂, x₁)
//
// with cos and sin [T, HeadDim] repeating the HeadDim/2 angles twice. It
// has no parameters: the frequencies are fixed at construction.
type Rotary struct {
	HeadDim int
	// invFreq are the frequencies f_j = Theta^(-2j/HeadDim) (scaled),
	// rounded to float32 as Hugging Face computes them.
	invFreq []float32
}

// NewRotary computes the frequencies of c.
func NewRotary(c RotaryConfig) (*Rotary, error) {
	if c.HeadDim < 2 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("nn: rotary: HeadDim %d must be even and at least 2", c.HeadDim)
	}
	if !(c.Theta > 1) || math.IsInf(c.Theta, 0) {
		return nil, fmt.Errorf("nn: rotary: Theta %v must be a finite base > 1", c.Theta)
	}
	half := c.HeadDim / 2
	inv := make([]float32, half)
	for j := range inv {
		// HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
		e := float32(2*j) / float32(c.HeadDim)
		inv[j] = float32(1 / float64(float32(math.Pow(c.Theta, float64(e)))))
	}
	switch s := c.Scaling; s.Type {
	case "", "default":
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
	default:
		return nil, fmt.Errorf("nn: rotary: rope scaling type %q (memfit knows llama3)", s.Type)
	}
	return &Rotary{HeadDim: c.HeadDim, invFreq: inv}, nil
}

// InvFreq returns a copy of the (scaled) frequencies f_j.
func (p *Rotary) InvFreq() []float32 { return append([]float32(nil), p.invFreq...) }

// Tables returns cos and sin [T, HeadDim] for positions pos..pos+T-1 in
// row-major order. The angle is the float32 product of position and
// frequency, as Hugging Face forms it; cos and sin are then exact to
// float64. The slices may be shared with later calls: read them only.
func (p *Rotary) Tables(pos, t int) (cos, sin []float64) {
	return p.tables(t, func(i int) int { return pos + i })
}

// TablesAt returns cos and sin [len(positions), HeadDim] for the given
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
		if !slices.Equal(e.freq, p.invFreq) || len(e.positions) != t {
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
	e := &tableEntry{freq: slices.Clone(p.invFreq), positions: make([]int32, t), cos: cos, sin: sin}
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

// compute makes tables' cos and sin.
func (p *Rotary) compute(t int, at func(i int) int) (cos, sin []float64) {
	d, half := p.HeadDim, p.HeadDim/2
	cos, sin = make([]float64, t*d), make([]float64, t*d)
	for i := range t {
		pos := float32(at(i))
		for j, f := range p.invFreq {
			a := float64(pos * f)
			c, s := math.Cos(a), math.Sin(a)
			cos[i*d+j], cos[i*d+half+j] = c, c
			sin[i*d+j], sin[i*d+half+j] = s, s
		}
	}
	return cos, sin
}

// Apply rotates x [..., T, HeadDim] whose T rows are the positions
// pos..pos+T-1 (pos > 0 for tokens after a KV cache's). cos and sin are
// made on x's device in x's dtype (as Hugging Face casts them to the
// query's), so the result is x's dtype. It is composed of Narrow, Neg,
// Concat, Mul and Add: the gradient is theirs.
func (p *Rotary) Apply(r *Run, x *tensor.Tensor, pos int) *tensor.Tensor {
	n := x.Dim()
	if n < 2 || x.Shape()[n-1] != p.HeadDim || pos < 0 {
		panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("input %v must be [..., time, %d] (at position %d)", x, p.HeadDim, pos)})
	}
	t := x.Shape()[n-2]
	var cv, sv []float64
	if device.StoresValues(x.Device()) {
		// A planning device needs the tables' bytes, not their values.
		cv, sv = p.Tables(pos, t)
	}
	shape := []int{t, p.HeadDim}
	cos, sin := table(x, shape, cv), table(x, shape, sv)
	defer cos.Release()
	defer sin.Release()
	return p.rotate(r, x, cos, sin)
}

// ApplyPositions rotates x [B, ..., T, HeadDim] whose tokens are at the
// given positions (B·T of them, row by row: a packed batch's, which
// restart at 0 where each example begins; tensor.Segments.Positions).
// cos and sin are [B, 1, …, T, HeadDim], broadcast over the dimensions
// between (the heads). Values and gradient are Apply's for each row's own
// positions.
func (p *Rotary) ApplyPositions(r *Run, x *tensor.Tensor, positions []int32) *tensor.Tensor {
	cos, sin := p.positionTables(x, positions)
	defer cos.Release()
	defer sin.Release()
	return p.rotate(r, x, cos, sin)
}

// positionTables returns ApplyPositions' cos and sin for x, which
// queries and keys of different head counts share.
func (p *Rotary) positionTables(x *tensor.Tensor, positions []int32) (cos, sin *tensor.Tensor) {
	n := x.Dim()
	if n < 3 || x.Shape()[n-1] != p.HeadDim || len(positions) != x.Shape()[0]*x.Shape()[n-2] {
		panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("input %v must be [batch, ..., time, %d] with a position for each of its batch·time tokens (%d given)", x, p.HeadDim, len(positions))})
	}
	for i, q := range positions {
		if q < 0 {
			panic(&tensor.Error{Op: "rotary", Msg: fmt.Sprintf("position %d of %v is %d, want >= 0", i, x, q)})
		}
	}
	shape := make([]int, n)
	for i := range shape {
		shape[i] = 1
	}
	shape[0], shape[n-2], shape[n-1] = x.Shape()[0], x.Shape()[n-2], p.HeadDim
	var cv, sv []float64
	if device.StoresValues(x.Device()) {
		cv, sv = p.TablesAt(positions)
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

// rotate is x·cos + rotate_half(x)·sin.
func (p *Rotary) rotate(r *Run, x, cos, sin *tensor.Tensor) *tensor.Tensor {
	n, half := x.Dim(), p.HeadDim/2
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
