package hf

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/models"
)

// Load builds the model of a checkpoint of any architecture memfit
// imports (Architecture picks it): a *models.GPT from GPT-2, a
// *models.Llama from Llama. The note says when the shape was inferred.
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
	if arch == "llama" {
		l, note, err := LoadLlamaWith(dev, path, o)
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
// SaveLlama for a *models.Llama; in BF16 when m holds quantized weights
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
		return saveGPT2(m, dir, dt)
	case *models.Llama:
		return saveLlama(m, dir, dt)
	}
	return fmt.Errorf("hf: %T has no Hugging Face layout (memfit writes GPT-2 and Llama)", m)
}
