package nn_test

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// RepeatKV repeats each key/value head as Hugging Face's repeat_kv does,
// laid out token by token ([B, T, Heads, Dh] in memory). AttendRows
// repeats nothing: attention takes the KVHeads heads of keys and values
// where the projections left them, and its output, laid out as the
// queries, joins its heads into [B, T, Dim] without a copy: a recorded
// AttendRows keeps one output, the tensor it returns, and the
// log-sum-exps.
func TestRepeatKVIsTokenMajor(t *testing.T) {
	const b, tt, heads, kv, d = 2, 5, 4, 2, 2 // d: the head's width
	dev := cpu.New()
	a, err := nn.NewGroupedQueryAttention(&nn.Builder{Dev: dev, Seed: 1}, "attn", nn.GQAConfig{Dim: heads * d, Heads: heads, KVHeads: kv, Rotary: nn.RotaryConfig{HeadDim: d, Theta: 100}, Weight: nn.Normal(0, 0.5)})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(a)
	vals := make([]float32, b*kv*tt*d)
	for i := range vals {
		vals[i] = float32(i)
	}
	x, err := tensor.FromFloat32(dev, vals, []int{b, kv, tt, d}, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	s := tensor.NewScope(tensor.NoGrad())
	r := nn.NewRun(s, 1)
	y := a.RepeatKV(r, x)
	if got, want := y.Shape(), []int{b, heads, tt, d}; !slices.Equal(got, want) {
		t.Fatalf("shape %v, want %v", got, want)
	}
	if got, want := y.Strides(), []int{tt * heads * d, d, heads * d, 1}; !slices.Equal(got, want) {
		t.Errorf("strides %v, want token-major %v", got, want)
	}
	got := y.Float64s()
	i := 0
	for bi := range b {
		for h := range heads {
			for ti := range tt {
				for e := range d {
					// Head h reads key/value head h/(heads/kv).
					want := float64(((bi*kv+h/(heads/kv))*tt+ti)*d + e)
					if got[i] != want {
						t.Fatalf("[%d %d %d %d] = %v, want %v", bi, h, ti, e, got[i], want)
					}
					i++
				}
			}
		}
	}
	s.Close()

	// Recorded: the projections require gradients, so attention saves
	// its inputs (views of qkv) and its output; the joined heads are that
	// output, viewed.
	qkv, err := tensor.New(dev, tensor.F32, []int{b * tt, (heads + 2*kv) * d}, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer qkv.Release()
	qkv.SetRequiresGrad(true)
	mem := dev.Memory()
	s = tensor.NewScope()
	defer s.Close()
	before := mem.Stats().Requested.Current
	joined := a.AttendRows(nn.NewRun(s, 1), qkv, b, tt)
	n := int64(b * tt * heads * d * 4)
	lse := int64(b * heads * tt * 4)
	if got, want := mem.Stats().Requested.Current-before, n+lse; got != want {
		t.Errorf("%d bytes live after AttendRows, want %d: one output and the log-sum-exps (no repeated keys and values)", got, want)
	}
	if !joined.IsContiguous() || !slices.Equal(joined.Shape(), []int{b, tt, heads * d}) {
		t.Errorf("joined heads %v (strides %v), want a contiguous [%d %d %d]", joined.Shape(), joined.Strides(), b, tt, heads*d)
	}
}
