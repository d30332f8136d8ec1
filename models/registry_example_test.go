package models_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
)

// Models are built by name from the knobs a run names and its data's
// shapes, as the train command's -model does.
func ExampleNew() {
	m, err := models.New("mlp", cpu.New(), models.Spec{Layers: 1, Width: 8, InShape: []int{4}, Classes: 3})
	if err != nil {
		panic(err)
	}
	defer nn.Release(m)
	fmt.Println(nn.Count(m), models.Names()) // 4·8+8 + 8·3+3
	// Output: 67 [cnn gemma2 gemma3 gpt llama mistral mlp phi3 qwen2 qwen3 smollm3]
}
