package tensor

import (
	"fmt"
	"slices"
	"sync"
)

// Segments are the examples packed end to end into the rows of a [B, T]
// batch (padding-free packing), given by each token's position in its
// example: positions restart at 0 where an example begins. Attention
// given Segments (SegmentedAttention) keeps every query inside its own
// example, and models read the positions for their position embeddings.
//
// Segments are host data that never change once made, so an op's
// backward or a checkpointed recompute may keep them as long as it needs:
// the attention kernels read one int32 per row (the start of the row's
// example, or of its sliding window: a Segments keeps the starts of each
// window attention asks for, made once) and no device tensor lives
// beside them. They are safe for concurrent use.
type Segments struct {
	b, t      int
	positions []int32 // [B·T], row by row
	starts    []int32 // [B·T]: the row where each token's example begins
	max       int32

	// windows holds the starts under each sliding window attention has
	// asked for (windowed): made once, read by every layer and pass.
	mu      sync.Mutex
	windows map[int][]int32
}

// NewSegments returns the segments of a [b, t] batch whose tokens are at
// positions (b·t of them, row by row, each >= 0). A position of 0 begins
// an example, and so does the first token of every row, whatever its
// position (an example cut at the end of the row before goes on there).
// The positions are copied: the caller may reuse its slice.
func NewSegments(positions []int32, b, t int) (*Segments, error) {
	if b < 1 || t < 1 || len(positions)%t != 0 || len(positions)/t != b { // b·t may overflow
		return nil, fmt.Errorf("tensor: segments: %d positions for a batch of %d rows of %d tokens", len(positions), b, t)
	}
	g := &Segments{b: b, t: t, positions: slices.Clone(positions), starts: make([]int32, b*t)}
	for r := range b {
		start := int32(0)
		for i, p := range positions[r*t : (r+1)*t] {
			if p < 0 {
				return nil, fmt.Errorf("tensor: segments: position %d of row %d is %d, want >= 0", i, r, p)
			}
			if p == 0 {
				start = int32(i)
			}
			g.starts[r*t+i] = start
			g.max = max(g.max, p)
		}
	}
	return g, nil
}

// Shape returns the batch's rows and tokens per row.
func (g *Segments) Shape() (b, t int) { return g.b, g.t }

// Positions returns the tokens' positions, row by row. The slice is the
// Segments' own: read it, do not change it.
func (g *Segments) Positions() []int32 { return g.positions }

// Starts returns, for every token, the index within its row of the token
// that begins its example (at most its own index), row by row: what the
// attention kernels take (device.Attention.Starts). The slice is the
// Segments' own: read it, do not change it.
func (g *Segments) Starts() []int32 { return g.starts }

// MaxPosition is the largest position.
func (g *Segments) MaxPosition() int { return int(g.max) }

// startsOrNil is g's starts, or nil for a nil g (no boundaries).
func (g *Segments) startsOrNil() []int32 {
	if g == nil {
		return nil
	}
	return g.starts
}

// check panics with *Error unless g describes a [B, T] batch.
func (g *Segments) check(op string, b, t int) {
	if g.b != b || g.t != t {
		panic(errorf(op, "segments of %d rows of %d tokens for a batch of %d rows of %d", g.b, g.t, b, t))
	}
}

// windowed returns the starts of g's rows under a sliding window of w
// keys (0 < w < T): max(the example's start, i-w+1). They are made on the
// first call for w and kept, so that the layers and passes of a step
// share one array per window.
func (g *Segments) windowed(w int) []int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.windows[w]; ok {
		return st
	}
	if g.windows == nil {
		g.windows = make(map[int][]int32)
	}
	st := windowStarts(g.starts, g.b, g.t, w)
	g.windows[w] = st
	return st
}

// windowStarts returns the starts of b rows of t queries under a sliding
// window of w keys, each row i from max(starts[i], i-w+1) (starts nil:
// 0): B·T int32s, non-decreasing along each row as the kernels require
// (device.Attention.CheckStarts), since both terms are.
func windowStarts(starts []int32, b, t, w int) []int32 {
	st := make([]int32, b*t)
	for r := range b {
		for i := range t {
			s := int32(max(i-w+1, 0))
			if starts != nil {
				s = max(s, starts[r*t+i])
			}
			st[r*t+i] = s
		}
	}
	return st
}

// attentionStarts are the starts attention's kernels take
// (device.Attention.Starts) for a [b, t] batch packed as seg (nil: one
// example per row) under a window of w keys (0, or t and more: none): nil
// when every query sees every key up to its own.
func attentionStarts(seg *Segments, b, t, w int) []int32 {
	switch {
	case w <= 0 || w >= t:
		return seg.startsOrNil()
	case seg == nil:
		return plainWindows.starts(b, t, w)
	}
	return seg.windowed(w)
}

// plainWindows keeps the window starts of batches without Segments, as a
// Segments keeps its own: every layer and pass of a step, and every
// traced call of a plan, reads one array rather than making B·T starts.
// It holds the few shapes used last (a run's micro-batches share one or
// two; a -fit search moves on from each).
var plainWindows windowCache

type windowCache struct {
	mu      sync.Mutex
	entries []windowEntry // most recently used last
}

type windowEntry struct {
	b, t, w int
	starts  []int32
}

const windowCacheSize = 4

func (c *windowCache) starts(b, t, w int) []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.entries {
		if e.b == b && e.t == t && e.w == w {
			c.entries = append(append(c.entries[:i:i], c.entries[i+1:]...), e)
			return e.starts
		}
	}
	e := windowEntry{b, t, w, windowStarts(nil, b, t, w)}
	if len(c.entries) == windowCacheSize {
		c.entries = slices.Delete(c.entries, 0, 1)
	}
	c.entries = append(c.entries, e)
	return e.starts
}

// startsMask returns a [B, 1, T, T] F32 tensor, 1 where key j lies before
// the start of query i (starts, B·T of them) and 0 elsewhere: what the
// composed attention fills with −Inf beside CausalScores' upper triangle.
func startsMask(s *Scope, like *Tensor, starts []int32, b, t int) *Tensor {
	m := mustAlloc(like.st.dev, F32, []int{b, 1, t, t}, s.cat)
	vals := make([]float32, b*t*t)
	for r := range b {
		for i := range t {
			row := vals[(r*t+i)*t:]
			for j := range int(starts[r*t+i]) {
				row[j] = 1
			}
		}
	}
	if err := m.SetFloat32s(vals); err != nil {
		m.Release()
		panic(err)
	}
	return m
}
