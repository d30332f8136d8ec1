package train

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// applyLoRA attaches -lora's adapters to the model and freezes the rest.
// When the run saves or resumes, it first fingerprints the base, whose
// values a LoRA checkpoint does not hold.
func (t *Trainer) applyLoRA() error {
	c := t.Config
	if c.Output.Save != "" || c.Output.Resume != "" {
		t.baseSum = baseFingerprint(t.Model.Parameters())
	}
	ad, err := lora.Apply(t.Model, nil, lora.Config{
		Rank: c.Memory.LoRA.Rank, Alpha: c.Memory.LoRA.Alpha, Dropout: c.Memory.LoRA.Dropout, Targets: c.Memory.LoRA.Targets,
		Seed: c.Seed, DType: c.paramDType(),
	})
	if err != nil {
		return fmt.Errorf("-lora %d: %s", c.Memory.LoRA.Rank, strings.TrimPrefix(err.Error(), "lora: "))
	}
	t.adapted = ad
	trained := nn.Count(t.Model) - countOf(ad.Base)
	t.logf("LoRA rank %d on %d Linear layers: %d of %d parameters train (%.2f%%)",
		c.Memory.LoRA.Rank, len(ad.Layers), trained, nn.Count(t.Model), 100*float64(trained)/float64(nn.Count(t.Model)))
	return nil
}

func countOf(ps []*tensor.Tensor) int {
	n := 0
	for _, p := range ps {
		n += p.Len()
	}
	return n
}

// baseFingerprint is the CRC-32C of every parameter's name, shape and
// values as built (before a frozen base goes to 16 bits), in 8 hex digits:
// what a LoRA checkpoint records of the base its adapters were trained
// on, so that they are never resumed onto another.
func baseFingerprint(params []*tensor.Tensor) string {
	var c uint32
	for _, p := range params {
		c = crc32.Update(c, castagnoli, []byte(p.Name()))
		for _, d := range p.Shape() {
			c = crc32.Update(c, castagnoli, binary.LittleEndian.AppendUint64(nil, uint64(d)))
		}
		c = updateFloat32s(c, p.Float32s())
	}
	return fmt.Sprintf("%08x", c)
}

// loraBase names the base a LoRA run's adapters apply to: the -init
// checkpoint, or the model built from the seed.
func loraBase(c Config) string {
	if c.Model.Init != "" {
		return c.Model.Init
	}
	return fmt.Sprintf("%s, seed %d", modelKey(c), c.Seed)
}
