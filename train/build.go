package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
)

// buildModel makes the model a Config names, by name from models'
// registry, for a dataset's shapes.
func buildModel(dev device.Device, cfg Config, ds *dataset) (Model, error) {
	dt := cfg.paramDType()
	if cfg.Memory.LoRA.Rank > 0 && cfg.Precision.AMP == "bf16" && cfg.Parallel.Engine == "off" && cfg.Model.Name != "cnn" { // the cnn keeps F32 parameters
		// The base is frozen and held in bf16 (holdFrozenInAutocast):
		// made so from the start, it never exists in F32, and an import's
		// peak is the bf16 model plus one tensor.
		dt = device.BF16
	}
	if cfg.Model.Init != "" {
		// Under ZeRO-3 an import is read block by block as it is sharded,
		// as a new model is drawn (below).
		g, _, err := hf.Load(dev, cfg.Model.Init, hf.Options{Dropout: cfg.Model.Dropout, Seed: cfg.Seed, HeadChunkRows: cfg.Memory.LMHeadChunkRows, DType: dt,
			Defer: cfg.Parallel.Zero == 3 && cfg.Memory.LoRA.Rank == 0})
		if err != nil {
			return nil, fmt.Errorf("-init %s: %v", cfg.Model.Init, err)
		}
		return g, nil
	}
	m, err := models.New(cfg.Model.Name, dev, models.Spec{
		Layers: cfg.Model.Layers, Width: cfg.Model.Width, Heads: cfg.Model.Heads, Context: cfg.Model.Context,
		Dropout: cfg.Model.Dropout, Seed: cfg.Seed, InShape: ds.inShape, Classes: ds.classes,
		HeadChunkRows: cfg.Memory.LMHeadChunkRows, DType: dt, KVHeads: cfg.Model.KVHeads, Hidden: cfg.Model.Hidden,
		// Under ZeRO-3 the parameters are drawn block by block as they
		// are sharded (setupDist): the model never exists whole on a
		// rank, and a rank's peak at start is one block, not 4P. (Not
		// under -lora, whose checkpoints fingerprint the whole base
		// when the adapters are applied; nor above, for an import.)
		Defer: cfg.Parallel.Zero == 3 && cfg.Memory.LoRA.Rank == 0,
	})
	if err != nil {
		return nil, fmt.Errorf("-model %s (-data %s): %v", cfg.Model.Name, displayPath(cfg.Data.Path), err)
	}
	return m, nil
}

// paramDType is the dtype -weights gives the parameters (Invalid: the
// model's default, F32).
func (c Config) paramDType() device.DType {
	if c.Precision.Weights == "bf16" {
		return device.BF16
	}
	return device.Invalid
}
