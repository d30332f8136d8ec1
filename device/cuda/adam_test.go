//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// adamSet is one parameter's four tensors for an Adam step.
type adamSet struct{ p, g, m, v device.View }

// adamTensors lays out parameters of the given sizes on d as a model
// does: the even-numbered ones each in buffers of their own, the odd ones
// packed one after another (at non-zero offsets) into shared buffers, so
// that a chunk running past its tensor's end would write its neighbour.
// Parameters of gradDT other than F32 get gradients of that dtype.
func adamTensors(t *testing.T, d *Device, rng *rand.Rand, sizes []int, gradDT map[int]device.DType) []adamSet {
	t.Helper()
	alloc := func(n int, dt device.DType, lo, hi float64) device.View {
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = lo + (hi-lo)*rng.Float64()
		}
		return upload(t, d, dt, []int{n}, vals).v
	}
	packed := 0
	for i, n := range sizes {
		if i%2 == 1 {
			packed += n
		}
	}
	shared := [4]device.View{alloc(packed+1, device.F32, -1, 1), alloc(packed+1, device.F32, -1, 1),
		alloc(packed+1, device.F32, -0.1, 0.1), alloc(packed+1, device.F32, 0, 0.01)}
	at := 1 // element 0 of each shared buffer belongs to no one
	sets := make([]adamSet, len(sizes))
	for i, n := range sizes {
		gdt := device.F32
		if dt, ok := gradDT[i]; ok {
			gdt = dt
		}
		if i%2 == 0 || gdt != device.F32 {
			sets[i] = adamSet{alloc(n, device.F32, -1, 1), alloc(n, gdt, -1, 1), alloc(n, device.F32, -0.1, 0.1), alloc(n, device.F32, 0, 0.01)}
			continue
		}
		piece := func(v device.View) device.View {
			return device.View{Buf: v.Buf, DType: v.DType, Offset: at, Shape: []int{n}, Strides: []int{1}}
		}
		sets[i] = adamSet{piece(shared[0]), piece(shared[1]), piece(shared[2]), piece(shared[3])}
		at += n
	}
	return sets
}

// copyAdam makes a fresh copy of sets (same values, same layout as
// contiguous buffers of their own).
func copyAdam(t *testing.T, d *Device, sets []adamSet) []adamSet {
	t.Helper()
	cp := func(v device.View) device.View {
		b, err := d.Alloc(int64(max(v.Len()*v.DType.Size(), 4)), memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		w := device.View{Buf: b, DType: v.DType, Shape: v.Shape, Strides: v.Strides}
		d.Copy(w, v)
		return w
	}
	out := make([]adamSet, len(sets))
	for i, s := range sets {
		out[i] = adamSet{cp(s.p), cp(s.g), cp(s.m), cp(s.v)}
	}
	return out
}

// TestAdamSteps checks k_adam_multi against k_adam: parameters, moments
// bit for bit, over sizes that end inside, at and just past a chunk, a
// single element, more tensors than one table holds, gradients in BF16
// (left to k_adam), with and without weight decay, coupled and
// decoupled, with a gradient scale; and that the tensors go into as few
// launches as the tables allow.
func TestAdamSteps(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var sizes []int
	for i := range 2*adamMulti + 7 {
		sizes = append(sizes, []int{1, 3, 384, adamChunk - 1, adamChunk, adamChunk + 1, 2*adamChunk + 5, 0}[i%8]+i%3)
	}
	bf16 := map[int]device.DType{5: device.BF16, 100: device.BF16}
	for _, c := range []struct {
		name string
		h    device.AdamHyper
	}{
		{"no decay", device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}},
		{"coupled decay", device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.5}},
		{"decoupled decay", device.AdamHyper{LR: 3e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.01, Decoupled: true, GradScale: 0.25}},
	} {
		t.Run(c.name, func(t *testing.T) {
			multi := adamTensors(t, d, rng, sizes, bf16)
			single := copyAdam(t, d, multi)
			for step := 1; step <= 2; step++ {
				h := c.h
				h.BiasCorrection1 = 1 - math.Pow(h.Beta1, float64(step))
				h.BiasCorrection2 = 1 - math.Pow(h.Beta2, float64(step))
				if got := adamStepsLaunches(d, multi, h); got != nil {
					// 167 tensors, 7 empty and 2 with BF16 gradients:
					// 158 in a table of 80 and one of 78.
					if got["k_adam_multi"] != 2 || got["k_adam"] != int64(len(bf16)) {
						t.Errorf("launches %v, want 2 of k_adam_multi and %d of k_adam", got, len(bf16))
					}
				}
				for _, s := range single {
					d.AdamStep(s.p, s.g, s.m, s.v, h)
				}
			}
			compareAdam(t, d, multi, single)
		})
	}
}

// TestAdamStepsSplits shrinks the blocks a launch may take: a table is
// launched before it would pass them, and a tensor bigger than them
// alone gets k_adam.
func TestAdamStepsSplits(t *testing.T) {
	d := newTestDevice(t)
	defer func(n int64) { adamMaxBlocks = n }(adamMaxBlocks)
	adamMaxBlocks = 3
	sizes := []int{adamChunk + 1, adamChunk, 3*adamChunk + 1, 1, 3 * adamChunk, 7}
	multi := adamTensors(t, d, rand.New(rand.NewPCG(3, 4)), sizes, nil)
	single := copyAdam(t, d, multi)
	h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, BiasCorrection1: 0.1, BiasCorrection2: 0.001}
	if got := adamStepsLaunches(d, multi, h); got != nil {
		// Blocks 2, 1, 4, 1, 3, 1: the 4 alone by k_adam, and tables
		// [2 1] [1] [3] [1].
		if got["k_adam_multi"] != 4 || got["k_adam"] != 1 {
			t.Errorf("launches %v, want 4 of k_adam_multi and 1 of k_adam", got)
		}
	}
	for _, s := range single {
		d.AdamStep(s.p, s.g, s.m, s.v, h)
	}
	compareAdam(t, d, multi, single)
}

// adamStepsLaunches runs one AdamSteps over sets and returns its
// launches by kernel, or nil where the device does not count them (a
// GPU).
func adamStepsLaunches(d *Device, sets []adamSet, h device.AdamHyper) map[string]int64 {
	var ps, gs, ms, vs []device.View
	for _, s := range sets {
		ps, gs, ms, vs = append(ps, s.p), append(gs, s.g), append(ms, s.m), append(vs, s.v)
	}
	if !d.CountsLaunches() {
		d.AdamSteps(ps, gs, ms, vs, h)
		return nil
	}
	d.ResetLaunchCounts()
	d.AdamSteps(ps, gs, ms, vs, h)
	got := map[string]int64{}
	for _, k := range d.LaunchCounts().Kernels {
		got[k.Name] = k.Launches
	}
	return got
}

func compareAdam(t *testing.T, d *Device, got, want []adamSet) {
	t.Helper()
	for i := range got {
		for _, c := range []struct {
			name   string
			gv, wv device.View
		}{{"param", got[i].p, want[i].p}, {"m", got[i].m, want[i].m}, {"v", got[i].v, want[i].v}} {
			g, w := download(d, c.gv), download(d, c.wv)
			for j := range g {
				if math.Float64bits(g[j]) != math.Float64bits(w[j]) {
					t.Fatalf("tensor %d (%d elements) %s[%d] = %v, k_adam gives %v", i, len(g), c.name, j, g[j], w[j])
				}
			}
		}
	}
	if err := d.Synchronize(); err != nil {
		t.Fatal(fmt.Errorf("synchronize: %w", err))
	}
}

// TestAdamTableFits: k_adam_multi's parameters (the table and the nine
// scalars) stay within the 4 KiB a launch's parameters may take, laid out
// as struct AdamMulti declares them.
func TestAdamTableFits(t *testing.T) {
	var tb adamTable
	tb.count, tb.start[1], tb.n[0], tb.p[0], tb.v[adamMulti-1] = 2, 5, 7, 0x1000, 0x2000
	a := tb.args(device.AdamHyper{LR: 1, BiasCorrection1: 1, BiasCorrection2: 1})
	if got, want := len(a.words), 1+6*adamMulti+9; got != want || 8*got > 4096 {
		t.Fatalf("%d words (%d bytes), want %d within 4096 bytes", got, 8*got, want)
	}
	if a.words[0] != 2 || a.words[2] != 5 || a.words[1+adamMulti] != 7 || a.words[1+2*adamMulti] != 0x1000 || a.words[6*adamMulti] != 0x2000 {
		t.Errorf("the table's words are out of place: count %d, start[1] %d, n[0] %d, p[0] %#x, v[last] %#x",
			a.words[0], a.words[2], a.words[1+adamMulti], a.words[1+2*adamMulti], a.words[6*adamMulti])
	}
}
