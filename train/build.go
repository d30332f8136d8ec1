package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
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
// imports it from -init. With -base nf4 or int8 the frozen Linear weights
// are quantized as the model is made, one tensor at a time
// (baseQuantizer): it never exists whole in a float dtype.
func buildModel(dev device.Device, cfg Config, ds *dataset, b modelBuild) (Model, error) {
	if err := checkModelSize(dev, cfg, ds, b); err != nil {
		return nil, err
	}
	quant := cfg.baseQuantizer()
	if b.defer_ {
		quant = nil // -zero 3 refuses -base nf4 and int8 (Validate)
	}
	if cfg.Model.Init != "" {
		// Deferred parameters are read block by block as they are
		// sharded, as a new model's are drawn (below).
		g, _, err := hf.Load(dev, cfg.Model.Init, hf.Options{Dropout: cfg.Model.Dropout, Seed: cfg.Seed, HeadChunkRows: cfg.Memory.LMHeadChunkRows,
			DType: b.dtype, Defer: b.defer_, Quantize: quant, Park: b.park})
		if err != nil {
			return nil, fmt.Errorf("-init %s: %v", cfg.Model.Init, err)
		}
		return g, nil
	}
	s := cfg.modelSpec()
	s.InShape, s.Classes, s.DType, s.Defer = ds.inShape, ds.classes, b.dtype, b.defer_ || quant != nil
	m, err := models.New(cfg.Model.Name, dev, s)
	if err != nil {
		return nil, fmt.Errorf("-model %s (-data %s): %v", cfg.Model.Name, displayPath(cfg.Data.Path), err)
	}
	if quant != nil {
		if err := materializeBase(m, quant, b.park); err != nil {
			nn.Release(m)
			return nil, fmt.Errorf("-base %s: %v", cfg.Precision.Base, err)
		}
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

// checkModelSize refuses a model whose parameters alone exceed the
// device's capacity, by arithmetic (models.Kind.Params, or -init's
// config.json), before a byte of it is allocated: building it would
// take the machine's memory up to the capacity first.
func checkModelSize(dev device.Device, cfg Config, ds *dataset, b modelBuild) error {
	capacity := dev.Memory().Capacity()
	if capacity <= 0 || b.defer_ {
		return nil // unlimited (planning), or never whole on this rank
	}
	var n int64
	if cfg.Model.Init != "" {
		ck, err := hf.Open(cfg.Model.Init)
		if err != nil {
			return fmt.Errorf("-init %s: %v", cfg.Model.Init, err)
		}
		s, _, err := hf.ReadShape(ck)
		ck.Close()
		if err != nil {
			return fmt.Errorf("-init %s: %v", cfg.Model.Init, err)
		}
		n = s.Params
	} else if k, ok := cfg.kind(); ok && k.Params != nil {
		s := cfg.modelSpec()
		s.InShape, s.Classes = ds.inShape, ds.classes
		n = k.Params(s)
	}
	dt := b.dtype
	if dt == device.Invalid {
		dt = device.F32
	}
	if q := cfg.baseQuant(); q != device.Invalid {
		// A lower bound: the embeddings and norms stay in dt.
		dt = q
		if cfg.OffloadsBase() {
			return nil // the base lives on the host: the plan sizes the rest
		}
	}
	if bytes := device.Bytes(dt, int(n)); bytes > capacity {
		return fmt.Errorf("%s: its %d parameters alone are %s in %v, more than the device's %s (-mem-limit, or on cpu the machine's memory less a margin); -plan shows the whole step",
			modelKey(cfg), n, memory.FormatBytes(bytes), dt, memory.FormatBytes(capacity))
	}
	return nil
}
