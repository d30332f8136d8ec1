package optim

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/internal/registry"
	"github.com/memfit/memfit/tensor"
)

// Settings are what a run says about its optimizer whatever the optimizer
// (the train command's -lr and -wd); each registered constructor maps
// them onto its own configuration and its defaults.
type Settings struct {
	LR          float64
	WeightDecay float64
}

// A Constructor makes an optimizer over params from Settings.
type Constructor func(params []*tensor.Tensor, s Settings) (*Optimizer, error)

var constructors = registry.New[Constructor]("optimizer")

// Register makes an optimizer available to New under name, as
// database/sql drivers register themselves: a package adding an optimizer
// calls it from an init function. Registering a name twice, or a nil
// constructor, panics.
func Register(name string, c Constructor) { constructors.Register(name, c) }

// New makes the optimizer registered as name over params.
func New(name string, params []*tensor.Tensor, s Settings) (*Optimizer, error) {
	c, ok := constructors.Get(name)
	if !ok {
		return nil, fmt.Errorf("optim: unknown optimizer %q (want %s)", name, strings.Join(Names(), ", "))
	}
	return c(params, s)
}

// Names lists the registered optimizers, sorted.
func Names() []string { return constructors.Names() }

// The optimizers of this package, as the train command names them. SGD
// takes momentum 0.9, the usual choice for training from scratch;
// adafactor takes the paper's relative step with Settings.LR as the
// ceiling of ρ (see Adafactor).
func init() {
	Register("sgd", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewSGD(ps, SGD{LR: s.LR, Momentum: 0.9, WeightDecay: s.WeightDecay})
	})
	Register("adam", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewAdam(ps, Adam{LR: s.LR, WeightDecay: s.WeightDecay})
	})
	Register("adamw", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewAdamW(ps, AdamW{LR: s.LR, WeightDecay: s.WeightDecay})
	})
	Register("adam8bit", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewAdam8bit(ps, Adam8bit{LR: s.LR, WeightDecay: s.WeightDecay})
	})
	Register("adamw8bit", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewAdamW8bit(ps, AdamW8bit{LR: s.LR, WeightDecay: s.WeightDecay})
	})
	Register("adafactor", func(ps []*tensor.Tensor, s Settings) (*Optimizer, error) {
		return NewAdafactor(ps, Adafactor{LR: s.LR, WeightDecay: s.WeightDecay})
	})
}
