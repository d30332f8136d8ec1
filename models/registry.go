package models

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/internal/registry"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Model is what the registry builds: a module whose repeated blocks run
// through a replaceable runner (how checkpoint policies apply).
type Model interface {
	nn.Module
	SetBlockRunner(nn.BlockRunner)
}

// Spec describes a model by the knobs a run names (the train command's
// -layers, -width, -heads, -kv-heads, -hidden, -context, -dropout and -seed) and the shapes of
// its data; each registered builder maps them onto its own configuration.
type Spec struct {
	Layers, Width, Heads, Context int
	Dropout                       float64
	Seed                          uint64
	// InShape is the shape of one input example (a token sequence's is
	// [Context]); Classes the number of classes, or the vocabulary of a
	// token task.
	InShape []int
	Classes int
	// HeadChunkRows overrides the rows per chunk of a token model's
	// chunked head and loss (gpt; 0: from the head's byte budget).
	HeadChunkRows int
	// DType of the parameters (mlp, gpt and llama): F32 when Invalid, or
	// BF16 for weights stored in 16 bits.
	DType tensor.DType
	// KVHeads and Hidden are llama's key/value heads and MLP width (0:
	// Heads, and 8/3·Width).
	KVHeads, Hidden int
	// Defer asks gpt and llama for parameters without memory, drawn when
	// ZeRO-3 shards them (GPTConfig.Defer); the other models ignore it.
	Defer bool
}

// A Builder makes a model on dev from a Spec.
type Builder func(dev device.Device, s Spec) (Model, error)

var builders = registry.New[Builder]("model")

// Reference is the model a run trains when none is named: the reference
// MLP of the project's benchmarks.
const Reference = "mlp"

// Register makes a model available to New under name, as database/sql
// drivers register themselves: a package adding a model calls it from an
// init function. Registering a name twice, or a nil builder, panics.
func Register(name string, b Builder) { builders.Register(name, b) }

// New builds the model registered as name.
func New(name string, dev device.Device, s Spec) (Model, error) {
	b, ok := builders.Get(name)
	if !ok {
		return nil, fmt.Errorf("models: unknown model %q (want %s)", name, strings.Join(Names(), ", "))
	}
	return b(dev, s)
}

// Names lists the registered models, sorted.
func Names() []string { return builders.Names() }

func init() {
	// mlp: Layers hidden layers of Width.
	Register("mlp", func(dev device.Device, s Spec) (Model, error) {
		in := 1
		for _, d := range s.InShape {
			in *= d
		}
		widths := []int{in}
		for range s.Layers {
			widths = append(widths, s.Width)
		}
		return built(NewMLP(dev, MLPConfig{Widths: append(widths, s.Classes), Dropout: s.Dropout, Seed: s.Seed, DType: s.DType}))
	})
	// cnn: two convolutions of Width/64 and Width/32 channels and a
	// hidden layer of Width/8, on 28×28 single-channel images.
	Register("cnn", func(dev device.Device, s Spec) (Model, error) {
		in := 1
		for _, d := range s.InShape {
			in *= d
		}
		if len(s.InShape) != 3 && in != 28*28 {
			return nil, fmt.Errorf("models: cnn takes 28x28 single-channel images, not examples of shape %v", s.InShape)
		}
		if s.DType != device.Invalid && s.DType != tensor.F32 {
			return nil, fmt.Errorf("models: cnn: parameters in %v are not supported (f32 only)", s.DType)
		}
		return built(NewCNN(dev, CNNConfig{Conv1: max(s.Width/64, 1), Conv2: max(s.Width/32, 1), Hidden: max(s.Width/8, 1),
			Classes: s.Classes, Dropout: s.Dropout, Seed: s.Seed}))
	})
	// gpt: a decoder of Layers blocks, Heads heads, width Width, over a
	// vocabulary of Classes tokens.
	Register("gpt", func(dev device.Device, s Spec) (Model, error) {
		return built(NewGPT(dev, GPTConfig{Layers: s.Layers, Heads: s.Heads, Dim: s.Width, Context: s.Context, Vocab: s.Classes,
			Dropout: s.Dropout, Seed: s.Seed, HeadChunkRows: s.HeadChunkRows, DType: s.DType, Defer: s.Defer}))
	})
	// llama: a Llama-layout decoder (RMSNorm, rotary embeddings,
	// SwiGLU, grouped-query attention with KVHeads, an untied head) of
	// Layers blocks, Heads heads, width Width, over Classes tokens.
	Register("llama", func(dev device.Device, s Spec) (Model, error) {
		return built(NewLlama(dev, LlamaConfig{Layers: s.Layers, Heads: s.Heads, KVHeads: s.KVHeads, Dim: s.Width, Hidden: s.Hidden,
			Context: s.Context, Vocab: s.Classes, Dropout: s.Dropout, Seed: s.Seed, HeadChunkRows: s.HeadChunkRows, DType: s.DType, Defer: s.Defer}))
	})
}

// built turns a constructor's result into a registry's, so that a failed
// constructor gives a nil Model rather than an interface holding a nil
// pointer.
func built[T Model](m T, err error) (Model, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}
