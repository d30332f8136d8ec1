package lora_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
)

// Adapters of rank 8 on the attention projections of a small GPT: only
// they train, a small fraction of the model.
func ExampleApply() {
	g, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 4, Heads: 4, Dim: 128, Context: 64, Vocab: 256})
	if err != nil {
		panic(err)
	}
	defer nn.Release(g)
	ad, err := lora.Apply(g, nil, lora.Config{Rank: 8, Alpha: 16, Targets: []string{"*.attn.*"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(ad.Layers[:2], len(ad.Layers), "layers")
	trainable := 0
	for _, p := range nn.Trainable(g) {
		trainable += p.Len()
	}
	fmt.Printf("%d of %d parameters train, %d bytes of adapters\n", trainable, nn.Count(g), ad.AdapterBytes())
	// Output:
	// [blocks.0.attn.qkv blocks.0.attn.proj] 8 layers
	// 24576 of 858880 parameters train, 98304 bytes of adapters
}
