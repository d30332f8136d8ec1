package checkpoint

import (
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

func (p Policy) budgetSegments(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) int {
	return len(blocks) // replaced below once measured
}
