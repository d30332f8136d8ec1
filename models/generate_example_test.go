package models_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Generation under autocast, as torch.autocast(dtype=torch.bfloat16)
// generation: f32 weights, every product in bf16 with f32 accumulation,
// and the KV cache held in bf16, half the bytes of an f32 one.
func ExampleGPT_Generate_autocast() {
	cfg := models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 32, Vocab: 11, Seed: 1}
	g, err := models.NewGPT(cpu.New(), cfg)
	if err != nil {
		panic(err)
	}
	defer nn.Release(g)
	mem := g.Tokens.Weight.Device().Memory()
	prompt := []int{3, 1, 4}
	tokens, err := g.Generate(prompt, 8, models.SampleOptions{Autocast: tensor.BF16})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(tokens), "tokens")
	fmt.Println("KV cache:", mem.Stats().Category(memory.KVCache).Peak, "bytes")
	fmt.Println("in f32:", models.KVCacheBytes(cfg, 1, len(prompt)+8, tensor.F32), "bytes")
	// Output:
	// 8 tokens
	// KV cache: 1408 bytes
	// in f32: 2816 bytes
}
