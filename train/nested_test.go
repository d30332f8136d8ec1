package train

import (
	"context"
	"testing"
)

// nestedConfig is a tiled Llama of eight blocks whose activations go to
// the host, checkpointed by ck: what a context of a million tokens runs
// as, small.
func nestedConfig(ck string) Config {
	c := tiled("llama")
	c.Model.Layers, c.Optim.Batch = 8, 1
	c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "nf4", "bf16"
	c.Memory.Tile, c.Memory.Offload.Mode, c.Memory.Checkpoint = 2048, "activations", ck
	return c
}

// -checkpoint nested trains Every's weights bit for bit, its plan is its
// measured peaks on the device and the host to the byte, and its host
// side holds fewer block inputs than Every's: about 2·√n of them; also
// with the frozen base streamed from the host (-fit's choice for the 8B
// shape's longest contexts on 40 and 48 GiB), whose fetches a segment's
// second recompute repeats.
func TestNestedCheckpoints(t *testing.T) {
	for _, offload := range []string{"activations", "activations,base"} {
		t.Run(offload, func(t *testing.T) {
			every, nested := nestedConfig("every"), nestedConfig("nested")
			every.Memory.Offload.Mode, nested.Memory.Offload.Mode = offload, offload
			testNested(t, every, nested)
		})
	}
}

func testNested(t *testing.T, every, nested Config) {
	run := func(c Config) (map[string][]uint32, PeakBytes) {
		c.Optim.Steps = planSteps
		tr := newTrainer(t, c)
		if _, err := tr.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return weights(t, tr), tr.Peaks()
	}
	want, everyPeak := run(every)
	got, nestedPeak := run(nested)
	sameWeights(t, got, want)
	pred, err := Plan(withSteps(nested, planSteps))
	if err != nil {
		t.Fatal(err)
	}
	if pred != nestedPeak {
		t.Errorf("nested: predicted %+v\nmeasured  %+v", pred, nestedPeak)
	}
	// A block's input, bf16 [T, width], on the host under each.
	input := int64(nested.Model.Context) * int64(nested.Model.Width) * 2
	t.Logf("host: %d B under every, %d B nested (block input %d B); device %d and %d B", everyPeak.HostTotal, nestedPeak.HostTotal, input, everyPeak.Total, nestedPeak.Total)
	// Eight blocks: Every keeps seven inputs (the last block is not
	// recomputed); three segments of at most three keep two segment
	// inputs and at most three of a segment's blocks.
	if saved := (everyPeak.HostTotal - nestedPeak.HostTotal) / input; saved < 2 {
		t.Errorf("the host holds %d B nested, %d B under every: want two block inputs (%d B) fewer at least", nestedPeak.HostTotal, everyPeak.HostTotal, 2*input)
	}
	if nestedPeak.Total > everyPeak.Total+input {
		t.Errorf("device peak %d B nested, %d B under every: want at most a block input more (the segment's, a leaf of its recompute)", nestedPeak.Total, everyPeak.Total)
	}
}

// -fit checkpoints at two levels where the host cannot hold every block's
// input beside the device's budget.
func TestFitChoosesNested(t *testing.T) {
	withHostCapacity(t, 0)
	every, nested := nestedConfig("every"), nestedConfig("nested")
	every.Device.Name, nested.Device.Name = "cuda", "cuda"
	pe, err := Plan(every)
	if err != nil {
		t.Fatal(err)
	}
	pn, err := Plan(nested)
	if err != nil {
		t.Fatal(err)
	}
	if pn.HostTotal >= pe.HostTotal {
		t.Fatalf("host side %d B nested, %d B under every: nothing to choose between", pn.HostTotal, pe.HostTotal)
	}
	c := every
	c.Fit, c.FitHost = max(need(every, pe), need(nested, pn)), pn.HostTotal
	choice, err := Fit(c, c.Fit)
	if err != nil {
		t.Fatal(err)
	}
	if choice.Config.Memory.Checkpoint != "nested" || choice.Peak.HostTotal > c.FitHost {
		t.Errorf("-fit chose %s (host side %d B, budget %d B), want -checkpoint nested", choice.Flags(c), choice.Peak.HostTotal, c.FitHost)
	}
}

func withSteps(c Config, n int) Config { c.Optim.Steps = n; return c }
