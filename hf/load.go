package hf

import (
	"fmt"
	"path/filepath"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Load builds the model of a checkpoint of any architecture memfit
// imports (Architecture picks it): a *models.GPT from GPT-2, a
// *models.Decoder from a decoder of any family memfit reads. The note
// says when the shape was inferred.
func Load(dev device.Device, path string, o Options) (models.Generator, string, error) {
	c, err := Open(path)
	if err != nil {
		return nil, "", err
	}
	arch, err := Architecture(c)
	c.Close()
	if err != nil {
		return nil, "", err
	}
	if arch != "gpt2" {
		l, note, err := LoadDecoderWith(dev, path, o)
		if err != nil {
			return nil, "", err
		}
		return l, note, nil
	}
	g, note, err := LoadGPT2With(dev, path, o)
	if err != nil {
		return nil, "", err
	}
	return g, note, nil
}

// Save writes m in the layout of its family: SaveGPT2 for a *models.GPT,
// SaveDecoder for a *models.Decoder; in BF16 when m holds quantized weights
// (SaveOptions).
func Save(m models.Model, dir string) error { return SaveWith(m, dir, SaveOptions{}) }

// SaveWith is Save with options: the tensors' dtype.
func SaveWith(m models.Model, dir string, o SaveOptions) error {
	dt, err := o.dtypeFor(m)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *models.GPT:
		if o.Adapters {
			return fmt.Errorf("hf: PEFT adapters are written for the decoder families (GPT-2's Conv1D layers are not)")
		}
		return saveGPT2(m, dir, dt, o)
	case *models.Decoder:
		return saveDecoder(m, dir, dt, o)
	}
	return fmt.Errorf("hf: %T has no Hugging Face layout (memfit writes GPT-2 and the decoder families)", m)
}

// shapeOnly builds the model of a checkpoint without weights (config.json
// alone) on dev, a device that stores no values (a plan's): its
// parameters take their bytes, the Linear weights Options.Quantize names
// in their quantized dtype and frozen, as an import of the weights would
// hold them; nothing is read. On a device that stores values it is an
// error: there is nothing to load.
func shapeOnly[M nn.Module](c *Checkpoint, dev device.Device, o Options, build func(defer_ bool) (M, error)) (M, error) {
	var zero M
	if device.StoresValues(dev) {
		return zero, fmt.Errorf("hf: %s holds %s but neither %s nor %s: a model's shape alone can be planned (-plan), not loaded", c.Dir, configFile, modelFile, indexFile)
	}
	m, err := build(o.Defer || o.Quantize != nil)
	if err != nil {
		return zero, fmt.Errorf("hf: %s: %w", filepath.Join(c.Dir, configFile), err)
	}
	if o.Quantize == nil || o.Defer {
		return m, nil
	}
	linear, blocks := nn.LinearWeights(m), nn.BlockParameters(m)
	for _, p := range m.Parameters() {
		q := device.Invalid
		if linear[p] {
			q = o.Quantize(p.Name())
		}
		if q == device.Invalid {
			err = p.Materialize()
		} else {
			p.SetRequiresGrad(false) // a quantized weight is frozen
			var src *tensor.Tensor
			if src, err = tensor.New(dev, q, p.Shape(), memory.Parameter); err == nil {
				if err = p.MaterializeFrom(src); err != nil {
					src.Release()
				}
			}
		}
		if err == nil && q != device.Invalid && o.Park != nil && blocks[p] {
			err = o.Park(p)
		}
		if err != nil {
			nn.Release(m)
			return zero, fmt.Errorf("hf: %s: %s: %w", c.Dir, p.Name(), err)
		}
	}
	return m, nil
}
