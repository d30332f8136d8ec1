package data

import (
	"errors"
	"fmt"
	"strings"
)

// IgnoreIndex is the target of a position that is not trained: padding,
// and system, user and prompt tokens when the loss is on the answers
// (PyTorch's and transformers' ignore_index).
const IgnoreIndex = -100

// LossOn says which tokens of a fine-tuning example are trained.
type LossOn int

const (
	// LossDefault trains the answers of prompt/completion, chat and
	// Alpaca records and every token of text records.
	LossDefault LossOn = iota
	// LossAnswers trains the completion, the assistant turns (with their
	// end-of-turn tokens) or the output, and the EOS after them; the
	// system, user and prompt tokens are IgnoreIndex. A text record is
	// all answer.
	LossAnswers
	// LossAll trains every token.
	LossAll
)

// ParseLossOn reads a -loss-on value: "answers", "all", or "" for the
// default.
func ParseLossOn(s string) (LossOn, error) {
	switch s {
	case "":
		return LossDefault, nil
	case "answers":
		return LossAnswers, nil
	case "all":
		return LossAll, nil
	}
	return 0, fmt.Errorf("loss on %q: want answers or all", s)
}

func (l LossOn) String() string {
	switch l {
	case LossDefault:
		return "default"
	case LossAnswers:
		return "answers"
	case LossAll:
		return "all"
	}
	return fmt.Sprintf("LossOn(%d)", int(l))
}

// resolve returns LossAnswers or LossAll for records of format f.
func (l LossOn) resolve(f RecordFormat) LossOn {
	if l == LossAll || f == FormatText {
		return LossAll
	}
	return LossAnswers
}

// Encoder is what fine-tuning datasets need of a tokenizer;
// *tokenizer.BPE satisfies it.
type Encoder interface {
	// Encode returns the tokens of text; special tokens written in the
	// text (<|eot_id|>, </s>) become their ids, as transformers encodes
	// a rendered chat, and nothing is added around it.
	Encode(text string) []int
	// VocabSize is one more than the largest token id.
	VocabSize() int
	// Fingerprint identifies the vocabulary and encoding rules.
	Fingerprint() string
}

// SFTOptions says how records become training examples.
type SFTOptions struct {
	// Context is the most positions a packed window or an example holds:
	// an example of L tokens takes L-1 positions (each predicts the next
	// token), and one longer than Context is cut to its first Context+1
	// tokens.
	Context int
	// Pack concatenates consecutive examples into windows of at most
	// Context positions without padding (an example is never split
	// between windows); each token carries its position within its
	// example. Without it, each example is one Sequence, and a batch is
	// padded to its longest.
	Pack bool
	// LossOn says which tokens are trained.
	LossOn LossOn
	// Template renders chat records; it must be set for them.
	Template *ChatTemplate
	// BOS and EOS are put before and after every prompt/completion,
	// Alpaca and text example (typically the tokenizer's BOS and EOS;
	// nil for none); the EOS is trained with the answer. Chat records
	// get what their template writes.
	BOS, EOS []int
}

// TokenizedExample is one example as it is trained: its tokens and, aligned
// with them, the label of each (the token itself where it is trained,
// IgnoreIndex elsewhere). Position t is trained to predict Labels[t+1], so
// Labels[0] is always IgnoreIndex.
type TokenizedExample struct {
	Tokens []int32 `json:"tokens"`
	Labels []int32 `json:"labels"`
}

// Alpaca's prompts, as Stanford Alpaca's train.py writes them; the output
// follows "### Response:" directly.
const (
	alpacaPromptInput = "Below is an instruction that describes a task, paired with an input that provides further context. " +
		"Write a response that appropriately completes the request.\n\n" +
		"### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:"
	alpacaPromptNoInput = "Below is an instruction that describes a task. " +
		"Write a response that appropriately completes the request.\n\n" +
		"### Instruction:\n%s\n\n### Response:"
)

// TokenizeRecord turns one record into the tokens and labels it is
// trained on (not cut to opt.Context). The tokens are those of the whole
// text the record renders to (the prompt and completion, Alpaca's prompt
// and output, or the chat template's rendering), encoded at once, so they
// equal what transformers gives for the same text; the answers' byte spans
// in that text are then mapped to tokens (tokenBoundary), never encoded
// apart.
func TokenizeRecord(rec Record, enc Encoder, opt SFTOptions) (TokenizedExample, error) {
	ids, trained, err := tokenize(rec, enc, opt)
	if err != nil {
		return TokenizedExample{}, err
	}
	ex := TokenizedExample{Tokens: make([]int32, len(ids)), Labels: make([]int32, len(ids))}
	for t, id := range ids {
		ex.Tokens[t] = int32(id)
		ex.Labels[t] = IgnoreIndex
		if trained[t] && t > 0 {
			ex.Labels[t] = int32(id)
		}
	}
	return ex, nil
}

// tokenize returns a record's tokens and which of them are trained.
func tokenize(rec Record, enc Encoder, opt SFTOptions) ([]int, []bool, error) {
	all := opt.LossOn.resolve(rec.Format) == LossAll
	var text string
	var spans [][2]int // answer spans in text, bytes
	around := true     // BOS and EOS go around the text
	switch rec.Format {
	case FormatText:
		text = rec.Text
	case FormatPromptCompletion:
		text = rec.Prompt + rec.Completion
		spans = [][2]int{{len(rec.Prompt), len(text)}}
	case FormatAlpaca:
		var prompt string
		if rec.Input != "" {
			prompt = fmt.Sprintf(alpacaPromptInput, rec.Instruction, rec.Input)
		} else {
			prompt = fmt.Sprintf(alpacaPromptNoInput, rec.Instruction)
		}
		text = prompt + rec.Output
		spans = [][2]int{{len(prompt), len(text)}}
	case FormatChat:
		if opt.Template == nil {
			return nil, nil, errors.New("chat records need the model's chat template (tokenizer_config.json's chat_template)")
		}
		var err error
		text, spans, err = chatSpans(opt.Template, rec.Messages, !all)
		if err != nil {
			return nil, nil, err
		}
		around = false
	default:
		return nil, nil, fmt.Errorf("unknown record format %d", int(rec.Format))
	}
	body := enc.Encode(text)
	var ids []int
	var trained []bool
	if around {
		ids = make([]int, 0, len(opt.BOS)+len(body)+len(opt.EOS))
		ids = append(append(append(ids, opt.BOS...), body...), opt.EOS...)
	} else {
		ids = body
	}
	trained = make([]bool, len(ids))
	off := 0
	if around {
		off = len(opt.BOS)
	}
	switch {
	case all:
		for t := range trained {
			trained[t] = true
		}
	default:
		for _, s := range spans {
			a := off + tokenBoundary(enc, text, s[0], body)
			b := off + tokenBoundary(enc, text, s[1], body)
			for t := a; t < b; t++ {
				trained[t] = true
			}
		}
		if around {
			for t := off + len(body); t < len(ids); t++ {
				trained[t] = true // the EOS ends the answer
			}
		}
	}
	return ids, trained, nil
}

// tokenBoundary returns the number of tokens of ids (the encoding of
// text) that lie before byte c of text. Where c is a token boundary of
// the whole encoding — as at a special token or a new line — the encoding
// of text[:c] is a prefix of ids and the answer is exact; where a token
// straddles c, it counts as after c (the longest common prefix).
func tokenBoundary(enc Encoder, text string, c int, ids []int) int {
	if c <= 0 {
		return 0
	}
	if c >= len(text) {
		return len(ids)
	}
	pre := enc.Encode(text[:c])
	n := 0
	for n < len(pre) && n < len(ids) && pre[n] == ids[n] {
		n++
	}
	return n
}

// chatSpans renders a conversation and, when answers is set, finds the
// byte span of each assistant turn in it: from the end of the
// conversation before it rendered with the generation prompt, which must
// be a prefix of the whole rendering, to the end of the turn. The turn is
// the conversation up to it rendered without the prompt, past that
// prefix: in the whole rendering as it is (the Llama 3, Mistral, ChatML
// and Gemma templates), or as its longest suffix there, for a template
// that renders a turn as the last one with a preamble it drops once more
// follow (Qwen 3's empty reasoning block, <think>\n\n</think>\n\n, only
// on the turns after the last question). A template whose turns differ
// otherwise is refused rather than labelled wrongly.
func chatSpans(t *ChatTemplate, msgs []Message, answers bool) (string, [][2]int, error) {
	vals, err := messageValues(msgs)
	if err != nil {
		return "", nil, err
	}
	whole, err := t.render(vals, false)
	if err != nil {
		return "", nil, err
	}
	if !answers {
		return whole, nil, nil
	}
	var spans [][2]int
	last := 0
	for k, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		before, err := t.render(vals[:k], true)
		if err != nil {
			return "", nil, fmt.Errorf("rendering the messages before message %d: %w", k, err)
		}
		upto, err := t.render(vals[:k+1], false)
		if err != nil {
			return "", nil, fmt.Errorf("rendering the messages up to message %d: %w", k, err)
		}
		if !strings.HasPrefix(whole, before) {
			return "", nil, fmt.Errorf("the chat template renders the messages before assistant message %d with the generation prompt as %q, which does not start the whole conversation's rendering: the answer's tokens cannot be found (train with loss on all)", k, tail(before))
		}
		if len(before) < last || !strings.HasPrefix(upto, before) {
			return "", nil, fmt.Errorf("the chat template's renderings of the conversation up to assistant message %d do not grow with it", k)
		}
		n := turnLength(whole[len(before):], upto[len(before):], m.Content)
		if n < 0 {
			return "", nil, fmt.Errorf("the chat template renders the messages up to assistant message %d as %q, which does not start the whole conversation's rendering, nor does any end of its last turn follow there: the answer's tokens cannot be found (train with loss on all)", k, tail(upto))
		}
		spans = append(spans, [2]int{len(before), len(before) + n})
		last = len(before) + n
	}
	return whole, spans, nil
}

// turnLength returns the length of the assistant turn that rest (the
// whole rendering after the turn's generation prompt) starts with: that
// of turn, the turn rendered as the last one, when rest starts with it,
// else of turn's longest proper suffix that rest starts with and that
// still holds the message's content (the turn without the preamble a
// template gives only the last turns; a shorter match, such as the turn's
// closing new line alone, would label the wrong tokens); -1 when none
// does.
func turnLength(rest, turn, content string) int {
	if strings.HasPrefix(rest, turn) {
		return len(turn)
	}
	content = strings.TrimSpace(content)
	if content == "" {
		return -1
	}
	for j := 1; j < len(turn); j++ {
		tail := turn[j:]
		if !strings.Contains(tail, content) {
			return -1 // shorter suffixes hold it no more
		}
		if strings.HasPrefix(rest, tail) {
			return len(tail)
		}
	}
	return -1
}

// tail returns the end of s for an error message.
func tail(s string) string {
	if len(s) > 60 {
		return "..." + s[len(s)-60:]
	}
	return s
}
