package train

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/models"
)

// Codec turns text into a token model's tokens and tokens back into text:
// how a prompt reaches the model and its continuation the user.
type Codec interface {
	Encode(text string) ([]int, error)
	Decode(tokens []int) string
}

// byteCodec is a byte corpus's: one token per byte.
type byteCodec struct{}

func (byteCodec) Encode(s string) ([]int, error) {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out, nil
}

func (byteCodec) Decode(t []int) string {
	b := make([]byte, len(t))
	for i, v := range t {
		b[i] = byte(v)
	}
	return string(b)
}

// idCodec is for token data without a tokenizer (token shards, the
// synthetic task): tokens written as decimal ids separated by spaces.
type idCodec struct{ vocab int }

func (c idCodec) Encode(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v >= c.vocab {
			return nil, fmt.Errorf("%s is not a token id in [0, %d): without a tokenizer, write the prompt as token ids separated by spaces", quoteShort(f), c.vocab)
		}
		out = append(out, v)
	}
	return out, nil
}

func (idCodec) Decode(t []int) string {
	s := make([]string, len(t))
	for i, v := range t {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, " ")
}

// Generate continues prompt by n tokens with the trainer's model (a GPT)
// and returns the continuation as text: the prompt is encoded as the
// training data is (bytes for a text file, token ids otherwise), run once,
// and each new token costs one token's forward through a KV cache
// (models.Generator: GPT, Llama). No graph is recorded. Unless o sets
// Autocast, generation runs under the run's -amp (its products in 16
// bits, the KV cache held in 16 bits), as the run's evaluations do.
func (t *Trainer) Generate(prompt string, n int, o models.SampleOptions) (string, error) {
	g, ok := t.Model.(models.Generator)
	if !ok || t.codec == nil {
		return "", fmt.Errorf("-generate: needs a token model (%s), not %T", orList(tokenModels()), t.Model)
	}
	encode := t.codec.Encode
	if t.Config.Generate.Chat {
		c, ok := t.codec.(interface {
			EncodeChat(string) ([]int, error)
		})
		if !ok {
			return "", fmt.Errorf("-chat: needs a tokenizer with a chat template (-tokenizer, or -init's directory)")
		}
		encode = c.EncodeChat
	}
	ids, err := encode(prompt)
	if err != nil && t.Config.Generate.Chat {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("-prompt: %v", err)
	}
	if len(ids) == 0 {
		return "", errors.New("-prompt: no tokens")
	}
	if max := g.ContextLen(); len(ids)+n > max {
		// Cutting the prompt would continue another text than the one
		// given.
		if n >= max {
			return "", fmt.Errorf("-generate %d: at most %d tokens fit in the context of %d after one of prompt", n, max-1, max)
		}
		return "", fmt.Errorf("-prompt of %d tokens and -generate %d exceed the model's context of %d: shorten the prompt to %d tokens or generate fewer", len(ids), n, max, max-n)
	}
	if o.Autocast == device.Invalid {
		o.Autocast = t.autocast
	}
	out, err := g.Generate(ids, n, o)
	if err != nil {
		return "", err
	}
	return t.codec.Decode(out), nil
}

// sampleOptions are the Config's sampling settings.
func (c Config) sampleOptions() models.SampleOptions {
	return models.SampleOptions{Temperature: c.Generate.Temperature, TopK: c.Generate.TopK, TopP: c.Generate.TopP, Seed: c.Seed}
}

// GenerateText runs Config.Generate: the continuation of Config.Prompt.
// A cancellation of the context the Trainer was built with stops it
// between tokens.
func (t *Trainer) GenerateText() (string, error) {
	ctx := t.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	stop := newStopper(ctx, t.Device.Memory())
	defer stop.close()
	stop.arm()
	return t.Generate(t.Config.Generate.Prompt, t.Config.Generate.Tokens, t.Config.sampleOptions())
}

// evalSample is what a text model writes at an evaluation: the greedy
// continuation, by evalSampleTokens, of the first evalSamplePrompt bytes
// of the first validation (or training) window. Empty for other models
// and data.
func (t *Trainer) evalSample() string {
	if each(t, func(h sampler) error {
		if !h.sampleable() {
			return errNoSample
		}
		return nil
	}) != nil {
		return ""
	}
	switch t.codec.(type) {
	case byteCodec, tokenizerCodec:
	default:
		return ""
	}
	g, ok := t.Model.(models.Generator)
	if !ok {
		return ""
	}
	src := t.val
	if src == nil || src.Len() == 0 {
		return ""
	}
	ex, err := src.Get(0)
	if err != nil {
		return ""
	}
	var in []int32
	switch w := ex.(type) {
	case data.Window:
		in = w.Input
	case *data.Window:
		in = w.Input
	}
	n := min(evalSampleTokens, g.ContextLen()-1)
	p := min(len(in), evalSamplePrompt, g.ContextLen()-n)
	if p < 1 || n < 1 {
		return ""
	}
	prompt := make([]int, p)
	for i := range prompt {
		prompt[i] = int(in[i])
	}
	out, err := g.Generate(prompt, n, models.SampleOptions{Autocast: t.autocast})
	if err != nil {
		return ""
	}
	return t.codec.Decode(prompt) + t.codec.Decode(out)
}

// errNoSample is a part's refusal of the evaluation sample.
var errNoSample = errors.New("no sample")

// The evaluation sample's prompt and continuation lengths, in tokens.
const (
	evalSamplePrompt = 16
	evalSampleTokens = 48
)
