package models

import (
	"fmt"
	"slices"
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

// A Kind is what a registered model is before one is built: how to build
// it and what a trainer may do with it, so that a run is checked and
// planned without naming models. What a built model can do at run time it
// says through interfaces (TokenModel, Generator, nn.Model's blocks).
type Kind struct {
	// Build makes the model.
	Build Builder
	// Tokens says it takes token sequences: Spec.Context and a
	// vocabulary (Spec.Classes) apply, and its heads must divide its
	// width. Otherwise it takes examples of a fixed shape with classes.
	Tokens bool
	// Image is the image shape it takes ([channels, height, width]); a
	// flat example of as many values is viewed as one. Nil: any vector.
	Image []int
	// DTypes are the parameter dtypes it can be built in besides F32
	// (Spec.DType).
	DTypes []tensor.DType
	// Recompute says activation checkpointing pays on it, so a search for
	// a configuration that fits tries it.
	Recompute bool
	// LR is its default learning rate (with Adam).
	LR float64
	// Key names its architecture and shape: two Specs with one key build
	// models with the same parameters (checkpoints record it).
	Key func(Spec) string
	// HF is the Hugging Face model_type it is imported from and exported
	// to (package hf), "" for none.
	HF string
	// Params is the number of parameter elements of the model a Spec
	// builds (for a Spec a builder accepts: at most one per registered
	// bound), computed without building it, so that a model too large
	// for its device is refused before anything is allocated. Nil: not
	// known.
	Params func(Spec) int64
}

var kinds = registry.New[Kind]("model")

// Reference is the model a run trains when none is named: the reference
// MLP of the project's benchmarks.
const Reference = "mlp"

// Register makes a model available to New under name with nothing known
// of it but how to build it (a Kind of Build alone), as database/sql
// drivers register themselves: a package adding a model calls it from an
// init function. Registering a name twice, or a nil builder, panics.
func Register(name string, b Builder) { RegisterKind(name, Kind{Build: b}) }

// RegisterKind is Register with what the model is (Kind).
func RegisterKind(name string, k Kind) {
	if k.Build == nil {
		panic(fmt.Sprintf("models: nil builder registered as %q", name))
	}
	kinds.Register(name, k)
}

// KindOf returns what name was registered as.
func KindOf(name string) (Kind, bool) { return kinds.Get(name) }

// New builds the model registered as name.
func New(name string, dev device.Device, s Spec) (Model, error) {
	k, ok := kinds.Get(name)
	if !ok {
		return nil, fmt.Errorf("models: unknown model %q (want %s)", name, strings.Join(Names(), ", "))
	}
	return k.Build(dev, s)
}

// Names lists the registered models, sorted.
func Names() []string { return kinds.Names() }

// ByHF returns the registered model imported from Hugging Face's
// model_type hf.
func ByHF(hf string) (string, bool) {
	for _, n := range Names() {
		if k, _ := KindOf(n); k.HF != "" && k.HF == hf {
			return n, true
		}
	}
	return "", false
}

func init() {
	// mlp: Layers hidden layers of Width.
	RegisterKind("mlp", Kind{LR: 1e-3, Recompute: true, DTypes: []tensor.DType{tensor.BF16}, Params: mlpParams,
		Key: func(s Spec) string { return fmt.Sprintf("mlp layers=%d width=%d", s.Layers, s.Width) },
		Build: func(dev device.Device, s Spec) (Model, error) {
			in := 1
			for _, d := range s.InShape {
				in *= d
			}
			widths := []int{in}
			for range s.Layers {
				widths = append(widths, s.Width)
			}
			return built(NewMLP(dev, MLPConfig{Widths: append(widths, s.Classes), Dropout: s.Dropout, Seed: s.Seed, DType: s.DType}))
		}})
	// cnn: two convolutions of Width/64 and Width/32 channels and a
	// hidden layer of Width/8, on 28×28 single-channel images.
	RegisterKind("cnn", Kind{LR: 2e-3, Image: []int{1, 28, 28}, Params: cnnParams,
		Key: func(s Spec) string { return fmt.Sprintf("cnn width=%d", s.Width) },
		Build: func(dev device.Device, s Spec) (Model, error) {
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
		}})
	// gpt: a decoder of Layers blocks, Heads heads, width Width, over a
	// vocabulary of Classes tokens.
	RegisterKind("gpt", Kind{LR: 3e-4, Tokens: true, Recompute: true, DTypes: []tensor.DType{tensor.BF16}, HF: "gpt2", Params: gptParams,
		Key: func(s Spec) string {
			return fmt.Sprintf("gpt layers=%d width=%d heads=%d context=%d", s.Layers, s.Width, s.Heads, s.Context)
		},
		Build: func(dev device.Device, s Spec) (Model, error) {
			return built(NewGPT(dev, GPTConfig{Layers: s.Layers, Heads: s.Heads, Dim: s.Width, Context: s.Context, Vocab: s.Classes,
				Dropout: s.Dropout, Seed: s.Seed, HeadChunkRows: s.HeadChunkRows, DType: s.DType, Defer: s.Defer}))
		}})
	// The decoder families (families.go): Llama's blocks and what each
	// adds, of Layers blocks, Heads heads (KVHeads key/value heads), width
	// Width and MLP width Hidden, over Classes tokens.
	for _, f := range Families() {
		RegisterKind(f.Name, f.kind())
	}
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

// Takes reports whether the model can be built with parameters in dt
// (F32 always).
func (k Kind) Takes(dt tensor.DType) bool {
	return dt == tensor.F32 || slices.Contains(k.DTypes, dt)
}

// The registered models' parameter counts (Kind.Params), in int64 (a
// Spec within the trainer's bounds cannot overflow them).

func mlpParams(s Spec) int64 {
	in := int64(1)
	for _, d := range s.InShape {
		in *= int64(d)
	}
	n, w := int64(0), int64(s.Width)
	for range s.Layers {
		n += in*w + w
		in = w
	}
	return n + in*int64(s.Classes) + int64(s.Classes)
}

func cnnParams(s Spec) int64 {
	c1, c2, h := int64(max(s.Width/64, 1)), int64(max(s.Width/32, 1)), int64(max(s.Width/8, 1))
	k := int64(s.Classes)
	return 25*c1 + c1 + 25*c1*c2 + c2 + 25*c2*h + h + h*k + k
}

// gptParams: token and position embeddings, per block two LayerNorms, the
// qkv and output projections and the MLP (12d²+13d), the final
// LayerNorm; the head is tied to the token embedding.
func gptParams(s Spec) int64 {
	d, l := int64(s.Width), int64(s.Layers)
	return int64(s.Classes)*d + int64(s.Context)*d + l*(12*d*d+13*d) + 2*d
}
