package nn_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// TestMergedWeightWithoutRoom: a device without room for the [Out, In]
// temporary of W + s·B·A makes MergedWeight (and MergeLoRA, and the
// export) return the out-of-memory error, changing nothing.
func TestMergedWeightWithoutRoom(t *testing.T) {
	// Room for the parameters (weight, bias, A, B: about 200 KB), not for
	// another 192×256 F32 temporary.
	b := &nn.Builder{Dev: cpu.New(cpu.Capacity(256 << 10)), Seed: 2}
	l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 256, Out: 192})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l)
	if err := l.AttachLoRA(nn.LoRAConfig{Rank: 4, Alpha: 12, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.MergedWeight(); !tensor.IsOOM(err) {
		t.Errorf("MergedWeight: %v, want out of memory", err)
	}
	if err := l.MergeLoRA(); !tensor.IsOOM(err) || l.Adapter.Merged() {
		t.Errorf("MergeLoRA: %v (merged %v), want out of memory and no merge", err, l.Adapter.Merged())
	}
	for _, e := range nn.Export(l) {
		if _, err := e.Float32s(); e.Name == "fc.weight" && !tensor.IsOOM(err) {
			t.Errorf("export of %s: %v, want out of memory", e.Name, err)
		}
	}
	if got := b.Dev.Memory().Stats().Requested.Current; got != nn.ParameterBytes(l) {
		t.Errorf("%d bytes allocated after the failures, want the parameters' %d", got, nn.ParameterBytes(l))
	}
}
