package train

import (
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// chunkedHead computes a token model's head and loss over chunks of rows
// (tensor.LinearCrossEntropy), so that the [tokens, vocabulary] logits
// and their gradient never exist whole; -lm-head full takes Forward's
// logits and CrossEntropy (the composed path, kept for comparison).
var chunkedHead = &technique{
	name:  "chunked LM head",
	group: "memory",
	doc:   "a token model's head and loss over chunks of rows: the logits and their gradient never exist whole; the same loss",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Memory.LMHead, "lm-head", "language-model head and loss (gpt, llama): chunked (over rows: the logits never exist whole) or full")
	},
	features: []feature{{
		name: "-lm-head chunked",
		on: func(c *Config) bool {
			k, _ := c.kind()
			return k.Tokens && c.Memory.LMHead != "full"
		},
		flag: func(c *Config) string { return flagOf("lm-head", c.Memory.LMHead) },
	}},
	check: func(c *Config) error {
		switch c.Memory.LMHead {
		case "chunked", "full":
			return nil
		}
		return bad("lm-head", c.Memory.LMHead, "unknown head (want chunked or full)")
	},
}

// TokenLosser is a model that computes its token loss from its hidden
// states without materialising the logits (models.GPT and models.Decoder,
// through tensor.LinearCrossEntropy). For token tasks the trainer uses it
// unless -lm-head is full.
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
