package train

import (
	"testing"

	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
)

// A quantized base streamed from the host (-offload base -base nf4) is
// parked as it is made: building the model, from the flags or from
// -init, never holds the base whole on the device — its peak is what
// stays resident (embeddings, norms, the head) plus one weight being
// quantized — and after the build the device holds none of it.
func TestOffloadBaseBuildsParked(t *testing.T) {
	lc := models.DecoderConfig{Layers: 6, Heads: 4, KVHeads: 2, Dim: 128, Hidden: 384, Context: 64, Vocab: 128, Seed: 5}
	l, err := models.NewDecoder(cpuDevice(t), lc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := hf.SaveDecoder(l, dir); err != nil {
		t.Fatal(err)
	}
	const rank = 4
	var base, resident, largest int64
	linear := nn.LinearWeights(l)
	blocks := nn.BlockParameters(l)
	for _, p := range l.Parameters() {
		if linear[p] && blocks[p] {
			base += int64(p.Len()) / 2 // nf4: about half a byte an element
			largest = max(largest, 4*int64(p.Len()))
			out, in := int64(p.Shape()[0]), int64(p.Shape()[1])
			resident += 4 * rank * (out + in) // its f32 adapter, on the device
		} else {
			resident += 2 * int64(p.Len()) // held in bf16 under -amp bf16
		}
	}
	nn.Release(l)
	for _, c := range []struct {
		name string
		cfg  func() Config
	}{
		{"from -init", func() Config { return initLlama(dir) }},
		{"from the flags", func() Config {
			c := tinyLlama()
			c.Model.Layers, c.Model.Width, c.Model.Hidden, c.Model.Vocab = 6, 128, 384, 128
			return c
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg()
			cfg.Memory.LoRA.Rank, cfg.Precision.AMP, cfg.Precision.Base, cfg.Memory.Offload.Mode = rank, "bf16", "nf4", "base"
			tr := newTrainer(t, cfg)
			st := tr.Device.Memory().Stats()
			peak, params := st.Requested.Peak, st.Category(memory.Parameter).Current
			t.Logf("build peak %d B, %d B of parameters on the device (resident part, adapters included, about %d B, the nf4 base about %d B on the host)", peak, params, resident, base)
			if params > resident+resident/4 {
				t.Errorf("%d B of parameters on the device after the build, want about the resident %d B (the base on the host)", params, resident)
			}
			for _, p := range tr.Model.Parameters() {
				if p.RequiresGrad() && p.Device() != tr.Device {
					t.Errorf("trained %s is on %s, want the training device %s", p.Name(), p.Device().Name(), tr.Device.Name())
				}
			}
			if peak > params+2*largest+base/4 {
				t.Errorf("the build peaked at %d B: more than the resident parameters %d B and a weight in both forms (%d B)", peak, params, 2*largest)
			}
		})
	}
}
