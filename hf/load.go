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
// SaveLlama for a *models.Llama.
func Save(m models.Model, dir string) error {
	switch m := m.(type) {
	case *models.GPT:
		return SaveGPT2(m, dir)
	case *models.Llama:
		return SaveLlama(m, dir)
	}
	return fmt.Errorf("hf: %T has no Hugging Face layout (memfit writes GPT-2 and Llama)", m)
}
