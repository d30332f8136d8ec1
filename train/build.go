package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/models"
)

// buildModel makes the model a Config names for a dataset's shapes.
func buildModel(dev device.Device, cfg Config, ds *dataset) (Model, error) {
	in := 1
	for _, d := range ds.inShape {
		in *= d
	}
	var m Model
	var err error
	switch cfg.Model {
	case "mlp":
		widths := []int{in}
		for range cfg.Layers {
			widths = append(widths, cfg.Width)
		}
		widths = append(widths, ds.classes)
		m, err = models.NewMLP(dev, models.MLPConfig{Widths: widths, Dropout: cfg.Dropout, Seed: cfg.Seed})
	case "cnn":
		if len(ds.inShape) != 3 && in != 28*28 {
			return nil, fmt.Errorf("-model cnn takes 28x28 single-channel images; -data %s has examples of shape %v", displayPath(cfg.Data), ds.inShape)
		}
		m, err = models.NewCNN(dev, models.CNNConfig{Conv1: max(cfg.Width/64, 1), Conv2: max(cfg.Width/32, 1), Hidden: max(cfg.Width/8, 1), Classes: ds.classes, Dropout: cfg.Dropout, Seed: cfg.Seed})
	case "gpt":
		m, err = models.NewGPT(dev, models.GPTConfig{Layers: cfg.Layers, Heads: cfg.Heads, Dim: cfg.Width, Context: cfg.Context, Vocab: ds.classes, Dropout: cfg.Dropout, Seed: cfg.Seed, HeadChunkRows: cfg.LMHeadChunkRows})
	}
	if err != nil {
		return nil, fmt.Errorf("-model %s: %v", cfg.Model, err)
	}
	return m, nil
}
