package hf_test

import (
	"fmt"
	"log"
	"os"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
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
	// Output: *models.Decoder "" [5 19 44 23 14 0 10 38]
}

// Options.Quantize stores the Linear weights it names in NF4 as they are
// read (here every one but the LM head): the model never exists in F32.
// A checkpoint in bitsandbytes' 4-bit layout (testdata/llama-nf4) loads
// the same way, from its codes as stored. SaveWith writes it back with
// its weights dequantized, in BF16 (Save's choice for such a model).
func ExampleOptions_quantize() {
	quantize := func(name string) device.DType {
		if name == "head.weight" {
			return device.Invalid
		}
		return device.NF4
	}
	out, err := os.MkdirTemp("", "memfit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(out)
	for _, dir := range []string{"testdata/llama-f32", "testdata/llama-nf4"} {
		m, _, err := hf.Load(cpu.New(), dir, hf.Options{Quantize: quantize})
		if err != nil {
			log.Fatal(err)
		}
		n := 0
		for _, p := range m.(models.Model).Parameters() {
			if p.DType() == device.NF4 {
				n++
			}
		}
		tokens, err := m.Generate([]int{3, 1, 4, 1, 5}, 8, models.SampleOptions{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(n, "nf4 weights;", tokens)
		if err := hf.SaveWith(m.(models.Model), out, hf.SaveOptions{DType: safetensors.BF16}); err != nil {
			log.Fatal(err)
		}
		nn.Release(m)
	}
	// Output:
	// 14 nf4 weights; [19 44 5 19 46 10 38 48]
	// 14 nf4 weights; [19 44 5 19 46 10 38 48]
}

// LoadPEFT attaches LoRA adapters saved in PEFT's layout
// (adapter_config.json, adapter_model.safetensors) to a fresh copy of
// their base: here those of a run on a Llama's query projections,
// written beside the merged model by SaveWith's Adapters (train
// -save-peft).
func ExampleLoadPEFT() {
	dir, err := os.MkdirTemp("", "memfit-peft")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	run, _, err := hf.Load(cpu.New(), "testdata/llama-f32", hf.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ad, err := lora.Apply(run, nil, lora.Config{Rank: 4, Alpha: 8, Targets: []string{"q_proj"}, Seed: 1,
		Alias: func(path string) (string, bool) { return hf.PEFTName("llama", path+".weight") }})
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i < len(ad.Adapters); i += 2 {
		ad.Adapters[i].Fill(0.05) // B, as training might have left it (it starts at zero)
	}
	if err := hf.SaveWith(run, dir, hf.SaveOptions{Adapters: true}); err != nil {
		log.Fatal(err)
	}
	nn.Release(run)

	base, _, err := hf.Load(cpu.New(), "testdata/llama-f32", hf.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer nn.Release(base)
	got, err := hf.LoadPEFT(base, dir, hf.PEFTOptions{})
	if err != nil {
		log.Fatal(err)
	}
	tokens, err := base.Generate([]int{3, 1, 4, 1, 5}, 8, models.SampleOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Layers, "rank", got.Rank, "scale", got.Scale())
	fmt.Println(tokens)
	// Output:
	// [blocks.0.attn.q blocks.1.attn.q] rank 4 scale 2
	// [5 19 44 5 19 46 19 46]
}
