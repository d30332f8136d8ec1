package train

import (
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// TokenLosser is a model that computes its token loss from its hidden
// states without materialising the logits (models.GPT and models.Llama, through
// tensor.LinearCrossEntropy). For token tasks the trainer uses it unless
// Config.LMHead is "full", which takes Forward's logits and CrossEntropy
// (the composed path, kept for comparison).
type TokenLosser interface {
	// TokenLoss is CrossEntropy(Forward(tokens), targets, o) with the
	// logits flattened to one row per token.
	TokenLoss(r *nn.Run, tokens, targets *tensor.Tensor, o tensor.CrossEntropyOptions) *tensor.Tensor
}

// chunkedLoss returns the model's TokenLosser when the run uses the
// chunked head.
func (t *Trainer) chunkedLoss() (TokenLosser, bool) {
	if !t.task.tokens || t.Config.Memory.LMHead == "full" {
		return nil, false
	}
	m, ok := t.Model.(TokenLosser)
	return m, ok
}
