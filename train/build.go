package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
)

// kind is what the run's model is (models.KindOf), false for a name no
// model is registered under (Validate says so).
func (c Config) kind() (models.Kind, bool) { return models.KindOf(c.Model.Name) }

// modelSpec is the model's shape as the run names it, for the registry's
// Kind (keys) and builders.
func (c Config) modelSpec() models.Spec {
	m := c.Model
	return models.Spec{Layers: m.Layers, Width: m.Width, Heads: m.Heads, Context: m.Context, Dropout: m.Dropout,
		Seed: c.Seed, HeadChunkRows: c.Memory.LMHeadChunkRows, KVHeads: m.KVHeads, Hidden: m.Hidden}
}

// buildModel makes the model a Config names, by name from models'
// registry, for a dataset's shapes, as the techniques shaped it (b), or
// imports it from -init.
func buildModel(dev device.Device, cfg Config, ds *dataset, b modelBuild) (Model, error) {
	if cfg.Model.Init != "" {
		// Deferred parameters are read block by block as they are
		// sharded, as a new model's are drawn (below).
		g, _, err := hf.Load(dev, cfg.Model.Init, hf.Options{Dropout: cfg.Model.Dropout, Seed: cfg.Seed, HeadChunkRows: cfg.Memory.LMHeadChunkRows,
			DType: b.dtype, Defer: b.defer_})
		if err != nil {
			return nil, fmt.Errorf("-init %s: %v", cfg.Model.Init, err)
		}
		return g, nil
	}
	s := cfg.modelSpec()
	s.InShape, s.Classes, s.DType, s.Defer = ds.inShape, ds.classes, b.dtype, b.defer_
	m, err := models.New(cfg.Model.Name, dev, s)
	if err != nil {
		return nil, fmt.Errorf("-model %s (-data %s): %v", cfg.Model.Name, displayPath(cfg.Data.Path), err)
	}
	return m, nil
}

// elems is the number of elements of a shape.
func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
