package nn

import "github.com/memfit/memfit/tensor"

// A Parent is a module made of other modules. Techniques that act on
// layers of one kind wherever they sit (LoRA adapts Linear layers) find
// them through Walk, which descends into a Parent's Children; every
// composite module of nn and of package models is one.
type Parent interface {
	Module
	// Children are the modules m is made of, in forward order. A module
	// used twice, or reached through two paths, may be listed twice.
	Children() []Module
}

// Walk calls visit for m and then for every module below it, depth first
// in the order of Children (a Model that is no Parent is walked through
// its Blocks). It stops at the first error visit returns and returns it.
func Walk(m Module, visit func(Module) error) error {
	if m == nil {
		return nil
	}
	if err := visit(m); err != nil {
		return err
	}
	var children []Module
	switch p := m.(type) {
	case Parent:
		children = p.Children()
	case Model:
		children = p.Blocks()
	}
	for _, c := range children {
		if err := Walk(c, visit); err != nil {
			return err
		}
	}
	return nil
}

// Children are the layers.
func (s *Sequential) Children() []Module { return s.Layers }

// Children are the layer and its pointwise tail.
func (f *Fused) Children() []Module {
	out := []Module{f.Layer}
	for _, p := range f.Then {
		out = append(out, p)
	}
	return out
}

// Children are the two projections.
func (a *CausalSelfAttention) Children() []Module { return []Module{a.QKV, a.Proj} }

// Children are the projections (q, k and v or the fused qkv, then o) and
// the query and key norms when it has them.
func (a *GroupedQueryAttention) Children() []Module { return a.made() }

// Children are the gate and up projections (or the fused one) and down.
func (m *GatedMLP) Children() []Module {
	if m.GateUp != nil {
		return []Module{m.GateUp, m.Down}
	}
	return []Module{m.Gate, m.Up, m.Down}
}

// LinearWeights is the set of m's Linear weights: its layers' (Walk), and
// an untied LM head's, which a model keeps out of its children when its
// loss reads the weight directly (models.Decoder's HeadWeight; a tied head is
// the token embedding, never a Linear weight). These are the weights a
// frozen base stores quantized.
func LinearWeights(m Module) map[*tensor.Tensor]bool {
	out, embeddings := map[*tensor.Tensor]bool{}, map[*tensor.Tensor]bool{}
	Walk(m, func(x Module) error {
		switch l := x.(type) {
		case *Linear:
			out[l.Weight] = true
		case *Embedding:
			embeddings[l.Weight] = true
		}
		return nil
	})
	if h, ok := m.(interface{ HeadWeight() *tensor.Tensor }); ok && !embeddings[h.HeadWeight()] {
		out[h.HeadWeight()] = true
	}
	return out
}

// BlockParameters is the set of the parameters of m's blocks (a Model's
// Blocks), empty for a module that is no Model: what a technique acting
// block by block (a streamed base, ZeRO-3's gathers) holds per block.
func BlockParameters(m Module) map[*tensor.Tensor]bool {
	out := map[*tensor.Tensor]bool{}
	if mm, ok := m.(Model); ok {
		for _, b := range mm.Blocks() {
			for _, p := range b.Parameters() {
				out[p] = true
			}
		}
	}
	return out
}
