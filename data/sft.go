package data

import (
	"errors"
	"fmt"
	"slices"
	"sort"
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
	// tokens. A chat record of more than Context+1 messages is refused
	// when it is tokenized: every message a template writes takes a
	// token at least, so the rest could never be trained, and rendering
	// them would cost time and memory for nothing. (0, for
	// TokenizeRecord alone: no limit.)
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
	// MaxRecordBytes bounds one record's bytes as the records are read
	// (OpenRecordsLimit; 0: DefaultMaxRecordBytes). It changes no
	// token, so a cache written under another limit is used as it is.
	MaxRecordBytes int64
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
// in that text are then mapped to tokens (spanTokens), never encoded
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
		if n := len(rec.Messages); opt.Context > 0 && n > opt.Context+1 {
			return nil, nil, fmt.Errorf("chat record of %d messages, more than a context of %d positions holds (a message takes a token at least): split the conversation", n, opt.Context)
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
		bounds, err := spanTokens(enc, text, body, spans)
		if err != nil {
			return nil, nil, err
		}
		for _, b := range bounds {
			for t := off + b[0]; t < off+b[1]; t++ {
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

// spanTokens maps byte spans of text to the tokens of ids, its encoding:
// each span [a, b) becomes the tokens [tokens before a, tokens before b).
// A token lies before byte c where it ends at c or before: where c is a
// token boundary of the whole encoding (as at a special token or a new
// line, where the encoding of text[:c] is a prefix of ids) the span is
// exact; a token that straddles c counts as after it.
//
// It takes one pass over the tokens (tokenBoundaries: where each ends in
// text, from the text each stands for), so a conversation of many turns
// costs little more than one of a few. Where
// the tokens do not spell the text plainly (around a token that stands
// for text a normalizer changed, or for a "▁" in the text), and for an
// Encoder that cannot say what text a token stands for (no Decode
// method), a boundary is found by encoding the text before it
// (tokenBoundary), which costs the text's length a boundary: up to a
// budget of 64 times the text, past which the record is refused rather
// than labelled for hours.
func spanTokens(enc Encoder, text string, ids []int, spans [][2]int) ([][2]int, error) {
	var cs []int // the boundaries within the text
	for _, s := range spans {
		for _, c := range s {
			if c > 0 && c < len(text) {
				cs = append(cs, c)
			}
		}
	}
	slices.Sort(cs)
	cs = slices.Compact(cs)
	before, unsure, ok := tokenBoundaries(enc, text, ids, cs)
	cost, budget := 0, 64*len(text)+1<<20
	at := func(c int) int {
		switch {
		case c <= 0:
			return 0
		case c >= len(text):
			return len(ids)
		}
		if ok {
			k := sort.Search(len(unsure), func(k int) bool { return unsure[k][1] >= c })
			if k == len(unsure) || unsure[k][0] > c {
				i, _ := slices.BinarySearch(cs, c)
				return before[i]
			}
		}
		cost += c
		return -1
	}
	out := make([][2]int, len(spans))
	for i, s := range spans {
		out[i] = [2]int{at(s[0]), at(s[1])}
	}
	if cost > budget {
		return nil, fmt.Errorf("the tokenizer's tokens do not spell the record's text (%d bytes, %d answers) plainly enough to map its answers to tokens in one pass, and encoding the text before each answer would take %d bytes of encoding, over the budget of %d: train with loss on all", len(text), len(spans), cost, budget)
	}
	for i, s := range spans {
		for j := range 2 {
			if out[i][j] < 0 {
				out[i][j] = tokenBoundary(enc, text, s[j], ids)
			}
		}
	}
	return out, nil
}

// tokenDecoder is an Encoder that says what text tokens stand for, as
// *tokenizer.BPE does.
type tokenDecoder interface {
	Decode(ids []int) (string, error)
}

// tokenBoundaries returns, for each byte offset of cs (sorted, within
// text), the number of tokens of ids, text's encoding, that end there or
// before, found in one pass from the text each token stands for: their
// texts follow one another in text, but for what encoders add or drop
// around them — a space put before a stretch of text (a byte-level BPE's
// prefix space, SentencePiece's "▁"), which ends where it is put, and
// white space an added token strips on its left or right. A token whose
// text is not there (a normalizer changed the text, an unknown token) is
// skipped with the tokens after it until a run of tokens spells the text
// again, within a few tokens and bytes; the tokens skipped end where that
// run starts. Such a stretch, and one where a " " of a token stands for a
// "▁" of the text (SentencePiece's tokens stand for both as " "), might be
// placed wrong: unsure lists their byte ranges, from where the first such
// token starts to where the next token spelled plainly ends, in order.
// False where the tokens cannot be followed at all. Memory is that of
// the boundaries and of the distinct tokens' texts, not of the tokens.
func tokenBoundaries(enc Encoder, text string, ids []int, cs []int) (before []int, unsure [][2]int, ok bool) {
	dec, ok := enc.(tokenDecoder)
	if !ok {
		return nil, nil, false
	}
	tt, ok := newTokenTexts(enc, dec, ids)
	if !ok {
		return nil, nil, false
	}
	piece := func(k int) string {
		if k >= len(ids) {
			return ""
		}
		s, good := tt.text(ids[k])
		if !good {
			ok = false
		}
		return s
	}
	const (
		skipTokens = 8  // tokens a resynchronization may skip
		skipBytes  = 64 // bytes of text it may skip
		run        = 3  // tokens that must then spell the text
	)
	before = make([]int, len(cs))
	next := 0 // the first boundary not yet placed
	last := 0 // where the last token ended
	end := func(k, e int) {
		e = max(e, last)
		last = e
		for ; next < len(cs) && cs[next] < e; next++ {
			before[next] = k // tokens 0 to k-1 end at cs[next] or before
		}
	}
	work, budget := 0, 64*len(text)+1<<16 // bytes compared resynchronizing
	pos, from, start := 0, -1, 0          // start: where token k-1 started
	for k := 0; k < len(ids); k++ {
		if n, put, subst, found := pieceAt(text, pos, piece(k), piece(k+1)); found && ok {
			// A space put before a token that follows a space of the
			// text might be that space, the token before having taken
			// the one put there.
			unsureHere := subst || put && pos > 0 && text[pos-1] == ' '
			switch {
			case unsureHere && from < 0:
				from = pos
				if put {
					from = start
				}
			case !unsureHere && from >= 0:
				unsure = append(unsure, [2]int{from, pos + n})
				from = -1
			}
			start = pos
			pos += n
			if n == 0 {
				// A token of no bytes of the text (a space an encoder
				// put before a stretch) lies after a boundary at pos.
				end(k, pos+1)
			} else {
				end(k, pos)
			}
			continue
		}
		if !ok {
			return nil, nil, false
		}
		// Resynchronize: the first token after k, and the first byte
		// from pos, from which a run of tokens spells the text.
		found := false
	search:
		for j := k + 1; j <= min(k+skipTokens, len(ids)); j++ {
			for q := pos; q <= min(pos+skipBytes, len(text)); q++ {
				p, m := q, 0
				for ; m < run && j+m < len(ids); m++ {
					pm := piece(j + m)
					n, _, _, good := pieceAt(text, p, pm, piece(j+m+1))
					work += len(pm) + 1
					if !good {
						break
					}
					p += n
				}
				if !ok {
					return nil, nil, false
				}
				if m == run || j+m == len(ids) && (j < len(ids) || q == len(text)) {
					for i := k; i < j; i++ {
						end(i, q)
					}
					if from < 0 {
						from = pos
					}
					start, pos, k, found = pos, q, j-1, true
					break search
				}
				if work > budget {
					return nil, nil, false
				}
			}
		}
		if !found {
			return nil, nil, false
		}
	}
	for ; next < len(cs); next++ {
		before[next] = len(ids)
	}
	if from >= 0 {
		unsure = append(unsure, [2]int{from, len(text)})
	}
	return before, unsure, true
}

// pieceAt returns the bytes of text at pos that a token's text p stands
// for, trying in turn: p itself; p without the space an encoder put
// before it; p after white space an added token stripped; each of those
// with a " " of p standing for a "▁" of the text (subst); p a space put
// before a stretch, standing for no bytes. The first that lets the next
// token's text, next, follow is taken (next "" at the end). Put says the
// token's first space was put there by the encoder.
func pieceAt(text string, pos int, p, next string) (n int, put, subst, ok bool) {
	type cand struct {
		n          int
		put, subst bool
	}
	var cands [9]cand
	k := 0
	add := func(n int, ok, put, subst bool) {
		if ok && (n > 0 || p == "") {
			cands[k] = cand{n, put, subst}
			k++
		}
	}
	q := pos
	for q < len(text) && isSpaceByte(text[q]) {
		q++
	}
	for _, sub := range []bool{false, true} {
		if sub && !strings.Contains(p, " ") {
			break
		}
		n, ok := spells(text, pos, p, sub)
		add(n, ok, false, sub)
		if strings.HasPrefix(p, " ") {
			n, ok := spells(text, pos, p[1:], sub)
			add(n, ok, true, sub)
		}
		if q > pos && p != "" {
			n, ok := spells(text, q, p, sub)
			add(q-pos+n, ok, false, sub)
			if strings.HasPrefix(p, " ") {
				n, ok := spells(text, q, p[1:], sub)
				add(q-pos+n, ok, true, sub)
			}
		}
	}
	if p == " " {
		cands[k] = cand{0, true, false}
		k++
	}
	for i := range k {
		c := cands[i]
		if i == k-1 || next == "" && pos+c.n == len(text) || follows(text, pos+c.n, next) {
			return c.n, c.put, c.subst, true
		}
	}
	return 0, false, false, false
}

// follows reports whether a token's text p can stand for the bytes of
// text at pos (pieceAt's forms, without looking further).
func follows(text string, pos int, p string) bool {
	if p == "" || p == " " {
		return true
	}
	if _, ok := spells(text, pos, p, true); ok {
		return true
	}
	if strings.HasPrefix(p, " ") {
		if _, ok := spells(text, pos, p[1:], true); ok {
			return true
		}
	}
	q := pos
	for q < len(text) && isSpaceByte(text[q]) {
		q++
	}
	if q > pos {
		return follows(text, q, strings.TrimPrefix(p, " ")) || p[0] != ' ' && follows(text, q, p)
	}
	return false
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// spells reports how many bytes of text at pos p spells, a " " in p
// standing for itself or, with subst, "▁".
func spells(text string, pos int, p string, subst bool) (int, bool) {
	if !subst {
		if strings.HasPrefix(text[pos:], p) {
			return len(p), true
		}
		return 0, false
	}
	j := pos
	for i := 0; i < len(p); i++ {
		switch {
		case j < len(text) && text[j] == p[i]:
			j++
		case p[i] == ' ' && strings.HasPrefix(text[j:], "▁"):
			j += len("▁")
		default:
			return 0, false
		}
	}
	return j - pos, true
}

// tokenTexts says what text each token stands for, decoded after a
// token whose text starts with neither a space nor nothing (the anchor),
// so that a decoder's stripping of leading spaces (SentencePiece's) falls
// on the anchor's text, not on the token's; each token is decoded once.
type tokenTexts struct {
	dec    tokenDecoder
	anchor int
	head   string // the anchor's text
	known  []bool // by id, for a vocabulary of up to 4Mi tokens
	texts  []string
	more   map[int]string // for others
}

func newTokenTexts(enc Encoder, dec tokenDecoder, ids []int) (*tokenTexts, bool) {
	tt := &tokenTexts{dec: dec, anchor: -1}
	// An anchor among the first tokens, else among a letter's (for a
	// text of spaces alone).
	for _, id := range slices.Concat(ids[:min(len(ids), 64)], enc.Encode("a")) {
		s, err := dec.Decode([]int{id})
		if err != nil {
			return nil, false
		}
		if s != "" && s[0] != ' ' {
			tt.anchor, tt.head = id, s
			break
		}
	}
	if tt.anchor < 0 {
		return nil, false
	}
	if v := enc.VocabSize(); v > 0 && v <= 1<<22 {
		tt.known, tt.texts = make([]bool, v), make([]string, v)
	} else {
		tt.more = map[int]string{}
	}
	return tt, true
}

// text returns the text token id stands for.
func (tt *tokenTexts) text(id int) (string, bool) {
	if id >= 0 && id < len(tt.known) && tt.known[id] {
		return tt.texts[id], true
	}
	if s, ok := tt.more[id]; ok {
		return s, true
	}
	both, err := tt.dec.Decode([]int{tt.anchor, id})
	if err != nil || !strings.HasPrefix(both, tt.head) {
		return "", false
	}
	s := both[len(tt.head):]
	if id >= 0 && id < len(tt.known) {
		tt.known[id], tt.texts[id] = true, s
	} else {
		if tt.more == nil {
			tt.more = map[int]string{}
		}
		tt.more[id] = s
	}
	return s, true
}

// tokenBoundary returns the number of tokens of ids (the encoding of
// text) that lie before byte c of text, by encoding the text before it:
// the longest common prefix of that encoding and ids. Where c is a token
// boundary of the whole encoding — as at a special token or a new line —
// the encoding of text[:c] is a prefix of ids and the answer is exact;
// where a token straddles c, it counts as after c.
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
