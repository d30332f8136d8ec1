package train

import (
	"path/filepath"
	"testing"
)

// ApplyInit takes the model and its shape from a checkpoint of either
// family, and -plan traces the imported model (parameters exactly the
// checkpoint's, in F32).
func TestApplyInitFamilies(t *testing.T) {
	for _, c := range []struct {
		dir                                            string
		model                                          string
		layers, heads, kvHeads, width, hidden, context int
		params                                         int64
	}{
		// wte 50·16, wpe 32·16, 2 blocks of 4·16 + 3·16·16+3·16 + 16·16+16 + 16·64+64 + 64·16+16, ln_f 2·16
		{"gpt2-f32", "gpt", 2, 2, 0, 16, 0, 32, 800 + 512 + 2*(64+816+272+1088+1040) + 32},
		// embed 50·16, 2 blocks of 2·16 + 2·16·16 + 2·8·16 + 3·16·40, norm 16, head 50·16
		{"llama-f32", "llama", 2, 4, 2, 16, 40, 32, 800 + 2*(32+512+256+1920) + 16 + 800},
	} {
		t.Run(c.dir, func(t *testing.T) {
			cfg := Default()
			cfg.Model.Init = filepath.Join("..", "hf", "testdata", c.dir)
			got, note, err := cfg.ApplyInit()
			if err != nil {
				t.Fatal(err)
			}
			if note != "" || got.Model.Name != c.model || got.Model.Layers != c.layers || got.Model.Heads != c.heads || got.Model.KVHeads != c.kvHeads ||
				got.Model.Width != c.width || got.Model.Hidden != c.hidden || got.Model.Context != c.context || got.Model.Vocab != 50 {
				t.Errorf("ApplyInit: %+v (note %q)", got, note)
			}
			cfg.Optim.Batch, cfg.Optim.Steps = 2, 1
			peak, err := Plan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if peak.Parameter != 4*c.params {
				t.Errorf("planned %d parameter bytes, want 4·%d", peak.Parameter, c.params)
			}
		})
	}
}
