package optim

import (
	"fmt"
	"slices"
	"strings"
	"sync"

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

var registry struct {
	sync.Mutex
	make map[string]Constructor
}

// Register makes an optimizer available to New under name, as
// database/sql drivers register themselves: a package adding an optimizer
// calls it from an init function. Registering a name twice, or a nil
// constructor, panics.
func Register(name string, c Constructor) {
	registry.Lock()
	defer registry.Unlock()
	if c == nil {
		panic("optim: Register of a nil constructor for " + name)
	}
	if _, dup := registry.make[name]; dup {
		panic("optim: Register called twice for " + name)
	}
	if registry.make == nil {
		registry.make = map[string]Constructor{}
	}
	registry.make[name] = c
}

// New makes the optimizer registered as name over params.
func New(name string, params []*tensor.Tensor, s Settings) (*Optimizer, error) {
	registry.Lock()
	c := registry.make[name]
	registry.Unlock()
	if c == nil {
		return nil, fmt.Errorf("optim: unknown optimizer %q (want %s)", name, strings.Join(Names(), ", "))
	}
	return c(params, s)
}

// Names lists the registered optimizers, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.make))
	for n := range registry.make {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// The optimizers of this package, as the train command names them. SGD
// takes momentum 0.9, the usual choice for training from scratch.
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
}
