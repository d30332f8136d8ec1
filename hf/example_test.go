package hf_test

import (
	"fmt"
	"log"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
)

// Load a GPT-2 checkpoint in Hugging Face's layout and continue a prompt.
func ExampleLoadGPT2() {
	g, _, err := hf.LoadGPT2(cpu.New(), "testdata/gpt2-f32")
	if err != nil {
		log.Fatal(err)
	}
	defer nn.Release(g)
	tokens, err := g.Generate([]int{3, 1, 4, 1, 5}, 8, models.SampleOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tokens)
	// Output: [27 32 32 32 32 32 32 32]
}

// Load picks the architecture from config.json (here a Llama with
// grouped-query attention) and returns a model that generates.
func ExampleLoad() {
	m, note, err := hf.Load(cpu.New(), "testdata/llama-f32", hf.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer nn.Release(m)
	tokens, err := m.Generate([]int{3, 1, 4, 1, 5}, 8, models.SampleOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%T %q %v\n", m, note, tokens)
	// Output: *models.Llama "" [5 19 44 23 14 0 10 38]
}
