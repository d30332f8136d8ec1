package lora

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memfit/memfit/freeze"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Config chooses the layers to adapt and their adapters.
type Config struct {
	Rank    int
	Alpha   float64 // scale Alpha/Rank; 0: Alpha = Rank
	Dropout float64 // on the adapters' input while training
	// Targets are path patterns of Linear layers (package freeze's globs);
	// none: every Linear layer. With Alias they may name layers by their
	// other names too, as PEFT's target_modules do: "q_proj" (a bare name:
	// every layer whose name ends in it), or a glob over the whole name
	// ("model.layers.1*.mlp.*").
	Targets []string
	// Alias, when set, gives a layer's other name (Hugging Face's and
	// PEFT's, hf.PEFTName) from its path; false for none.
	Alias func(path string) (string, bool)
	// Seed draws the adapters' A matrices.
	Seed uint64
	// DType of the adapters (F32 when unset).
	DType tensor.DType
}

// Adapted is what Apply did.
type Adapted struct {
	Layers   []string         // the adapted layers' paths, in model order
	Adapters []*tensor.Tensor // their A and B, which train
	Base     []*tensor.Tensor // every other parameter, now frozen
}

// AdapterBytes is the memory of the adapters' values.
func (a *Adapted) AdapterBytes() int64 {
	var n int64
	for _, p := range a.Adapters {
		n += p.Bytes()
	}
	return n
}

// linears returns the distinct Linear layers of m in walk order.
func linears(m nn.Module) []*nn.Linear {
	var out []*nn.Linear
	seen := map[*nn.Linear]bool{}
	nn.Walk(m, func(x nn.Module) error {
		if l, ok := x.(*nn.Linear); ok && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
		return nil
	})
	return out
}

// Path is a Linear layer's path: its weight's name without ".weight".
func Path(l *nn.Linear) string { return strings.TrimSuffix(l.Weight.Name(), ".weight") }

// Apply attaches an adapter to every Linear layer of m that c.Targets
// match, then freezes every parameter that is not an adapter's (package
// freeze: no gradient, and when opt is not nil no optimizer state). It is
// an error for a pattern to match no Linear layer, for m to have none, or
// for a matched layer to have an adapter already; on error m is as it was.
func Apply(m nn.Module, opt freeze.StateDropper, c Config) (*Adapted, error) {
	ls := linears(m)
	if len(ls) == 0 {
		return nil, fmt.Errorf("lora: the model has no Linear layer to adapt")
	}
	paths := make([]string, len(ls))
	byPath := make(map[string]*nn.Linear, len(ls))
	for i, l := range ls {
		paths[i] = Path(l)
		byPath[paths[i]] = l
	}
	targets := c.Targets
	if len(targets) == 0 {
		targets = []string{"*"}
	}
	chosen, err := selectTargets(paths, targets, c.Alias)
	if err != nil {
		return nil, fmt.Errorf("lora: targets: %v", err)
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("lora: targets %q choose no Linear layer", strings.Join(c.Targets, ","))
	}
	for _, p := range chosen {
		// A rank above min(in, out) adds parameters and memory but no
		// direction the update could not take at min(in, out).
		w := byPath[p].Weight.Shape()
		if lim := min(w[0], w[1]); c.Rank > lim {
			return nil, fmt.Errorf("lora: rank %d is above the %d of layer %s (%d×%d): its update has at most %d independent directions", c.Rank, lim, p, w[0], w[1], lim)
		}
	}
	ad := &Adapted{}
	undo := func() {
		for _, p := range ad.Layers {
			l := byPath[p]
			l.Adapter.A.Release()
			l.Adapter.B.Release()
			l.Adapter = nil
		}
	}
	for _, p := range chosen {
		l := byPath[p]
		if l.Adapter != nil {
			undo()
			return nil, fmt.Errorf("lora: layer %s already has an adapter", p)
		}
		if err := l.AttachLoRA(nn.LoRAConfig{Rank: c.Rank, Alpha: c.Alpha, Dropout: c.Dropout, Seed: c.Seed, DType: c.DType}); err != nil {
			undo()
			return nil, fmt.Errorf("lora: %v", err)
		}
		ad.Layers = append(ad.Layers, p)
		ad.Adapters = append(ad.Adapters, l.Adapter.A, l.Adapter.B)
	}
	freezeBase(m, opt, ad)
	return ad, nil
}

// Adopt is Apply for the adapters m has already (hf.LoadPEFT attaches
// those of a file, with its values): it lists them and freezes every
// other parameter as Apply does. It is an error for m to have no adapter,
// or a merged one (it would train nothing).
func Adopt(m nn.Module, opt freeze.StateDropper) (*Adapted, error) {
	ad := &Adapted{}
	for _, l := range linears(m) {
		a := l.Adapter
		if a == nil {
			continue
		}
		if a.Merged() {
			return nil, fmt.Errorf("lora: the adapter of layer %s is merged into its weight: unmerge it to train it", Path(l))
		}
		ad.Layers = append(ad.Layers, Path(l))
		ad.Adapters = append(ad.Adapters, a.A, a.B)
	}
	if len(ad.Layers) == 0 {
		return nil, fmt.Errorf("lora: the model has no LoRA adapter to adopt")
	}
	freezeBase(m, opt, ad)
	return ad, nil
}

// freezeBase freezes every parameter of m that is not one of ad's
// adapters, listing it in ad.Base, and drops opt's state of them.
func freezeBase(m nn.Module, opt freeze.StateDropper, ad *Adapted) {
	isAdapter := make(map[*tensor.Tensor]bool, len(ad.Adapters))
	for _, p := range ad.Adapters {
		isAdapter[p] = true
	}
	for _, p := range m.Parameters() {
		if isAdapter[p] {
			continue
		}
		p.SetRequiresGrad(false)
		p.SetGrad(nil)
		ad.Base = append(ad.Base, p)
	}
	if opt != nil && len(ad.Base) > 0 {
		opt.DropState(ad.Base...)
	}
}

// selectTargets returns the paths the targets choose, in paths' order:
// each target matches paths as a freeze pattern, or, when it matches
// none and alias is set, the layers' other names (a bare name as PEFT
// reads one: any name ending in ".name").
func selectTargets(paths, targets []string, alias func(string) (string, bool)) ([]string, error) {
	var names []string // paths' other names, and which path each is
	var of []string
	if alias != nil {
		for _, p := range paths {
			if a, ok := alias(p); ok {
				names, of = append(names, a), append(of, p)
			}
		}
	}
	hit := map[string]bool{}
	for _, t := range targets {
		got, err := freeze.Select("Linear layer", paths, t)
		if err != nil && len(names) > 0 {
			pattern := t
			if !strings.ContainsAny(t, ".*?[") {
				pattern = "*." + t
			}
			if other, aerr := freeze.Select("Linear layer", names, pattern); aerr == nil {
				got, err = nil, nil
				for _, a := range other {
					got = append(got, of[slices.Index(names, a)])
				}
			}
		}
		if err != nil {
			return nil, err
		}
		for _, p := range got {
			hit[p] = true
		}
	}
	var out []string
	for _, p := range paths {
		if hit[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// Merge folds every adapter of m into its weight (nn.Linear.MergeLoRA):
// the merged model computes what the adapted one does with one product
// per layer, for inference or export.
func Merge(m nn.Module) error {
	for _, l := range linears(m) {
		if err := l.MergeLoRA(); err != nil {
			return err
		}
	}
	return nil
}

// Unmerge undoes Merge (within rounding; see nn.Linear.UnmergeLoRA).
func Unmerge(m nn.Module) error {
	for _, l := range linears(m) {
		if err := l.UnmergeLoRA(); err != nil {
			return err
		}
	}
	return nil
}
