package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/models"
)

// buildModel makes the model a Config names, by name from models'
// registry, for a dataset's shapes.
func buildModel(dev device.Device, cfg Config, ds *dataset) (Model, error) {
	m, err := models.New(cfg.Model, dev, models.Spec{
		Layers: cfg.Layers, Width: cfg.Width, Heads: cfg.Heads, Context: cfg.Context,
		Dropout: cfg.Dropout, Seed: cfg.Seed, InShape: ds.inShape, Classes: ds.classes,
		HeadChunkRows: cfg.LMHeadChunkRows, DType: cfg.paramDType(),
	})
	if err != nil {
		return nil, fmt.Errorf("-model %s (-data %s): %v", cfg.Model, displayPath(cfg.Data), err)
	}
	return m, nil
}

// paramDType is the dtype -weights gives the parameters (Invalid: the
// model's default, F32).
func (c Config) paramDType() device.DType {
	if c.Weights == "bf16" {
		return device.BF16
	}
	return device.Invalid
}
