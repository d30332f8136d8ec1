package checkpoint

import (
	"sync"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// budgetState is what a Budget policy learns about the model it runs.
//
// Its cost model for n blocks cut into k segments is base + blocksPeak(n,
// k), where a is the bytes of a block's input (what a segment boundary
// keeps), c the activation bytes one recording block forward adds, and base
// everything else alive at the peak (embeddings, head, loss). The first
// call runs the cut of smallest predicted footprint and
// measures c with one extra recorded forward of the first block; the
// second call reads the activation peak since then (a watermark, so
// the training loop may reset the allocator's peaks meanwhile), solves for base, and
// from then on the policy uses the fewest segments whose predicted peak
// fits the budget (the smallest footprint when none does).
type budgetState struct {
	mu    sync.Mutex
	phase int // 0: nothing measured; 1: measuring the Every step; 2: decided
	a, c  int64
	k     int
	mark  *memory.Watermark // the measured step's peak
}

func (p Policy) budgetSegments(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) int {
	st := p.state
	st.mu.Lock()
	defer st.mu.Unlock()
	n := len(blocks)
	mem := x.Device().Memory()
	act := func() int64 { return mem.Stats().Category(memory.Activation).Current }
	switch st.phase {
	case 0:
		if !r.Grad() || n == 0 {
			return 1
		}
		before := act()
		probe := r.With()
		y := blocks[0].Forward(r.In(probe), x)
		st.c = act() - before
		y.Release()
		probe.Close()
		st.a = x.Bytes()
		// Measure with the cut of smallest footprint.
		st.k = n
		for k := 1; k <= n; k++ {
			if st.blocksPeak(n, k) < st.blocksPeak(n, st.k) {
				st.k = k
			}
		}
		st.mark = mem.NewWatermark()
		st.phase = 1
		return st.k
	case 1:
		peak := st.mark.PeakOf(memory.Activation)
		st.mark.Close()
		base := peak - st.blocksPeak(n, st.k)
		smallest := st.k
		st.k = smallest
		for k := 1; k <= n; k++ {
			if base+st.blocksPeak(n, k) <= p.budget {
				st.k = k
				break
			}
		}
		st.phase = 2
	}
	return st.k
}

// Decided reports the number of segments a Budget policy settled on (0
// while it is still measuring, or for other policies).
func (p Policy) Decided() int {
	if p.state == nil {
		return 0
	}
	p.state.mu.Lock()
	defer p.state.mu.Unlock()
	if p.state.phase < 2 {
		return 0
	}
	return p.state.k
}

// blocksPeak predicts the activation bytes the blocks hold at the peak when
// n blocks are cut into k segments as Sequential cuts them: the kept
// segment inputs, plus the larger of the last segment's activations (never
// recomputed) and a recomputed segment's activations together with its
// output, which exists twice while it is recomputed (once kept as the next
// segment's input).
func (st *budgetState) blocksPeak(n, k int) int64 {
	last := n - n*(k-1)/k
	most := last * int(st.c)
	for i := 0; i < k-1; i++ {
		size := n*(i+1)/k - n*i/k
		most = max(most, size*int(st.c)+int(st.a))
	}
	return int64(k-1)*st.a + int64(most)
}
