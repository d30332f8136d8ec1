package data

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate renders conversations as a model was trained to read them:
// the chat_template of its tokenizer_config.json, a Jinja template, run by
// github.com/ardanlabs/jinja with the variables transformers gives it
// (messages, add_generation_prompt, tools and documents as none, and the
// special tokens bos_token, eos_token, unk_token and pad_token that the
// configuration names). A ChatTemplate is safe for concurrent use.
type ChatTemplate struct {
	// Source is the template's text.
	Source string
	// Name says where the template came from (the file ReadChatTemplate
	// read it from), for error messages, which add the key of a JSON
	// file's (tokenizer_config.json: chat_template); "" names it by its
	// digest.
	Name string
	// BOS and EOS are the bos_token and eos_token strings ("" when the
	// configuration names none: the variable is then undefined).
	BOS, EOS string
	// Special holds the other special-token variables (unk_token,
	// pad_token) that the configuration names.
	Special map[string]string

	tmpl *tplTemplate
	// marks is the prefix of the markers that find the answers in a
	// rendering (chatSpans); gen is the template with its
	// {% generation %} blocks marked, nil when it has none.
	marks string
	gen   *tplTemplate
	// vars are more variables to render with (tests pin strftime_now).
	vars map[string]jinja.Value
	// limits are a rendering's over variables of so many bytes; nil is
	// tplDefaultLimits (the fuzz target sets smaller).
	limits func(inputBytes int64) tplLimits
}

// NewChatTemplate compiles a chat template; bos and eos become bos_token
// and eos_token ("" leaves them undefined). The template runs sandboxed
// (template.go): a template that nests too deep is refused here, one
// that would run, recurse or write without end fails when rendered.
func NewChatTemplate(source, bos, eos string) (*ChatTemplate, error) {
	t, err := tplCompile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	ct := &ChatTemplate{Source: source, BOS: bos, EOS: eos, tmpl: t, marks: newMarkPrefix(source)}
	if marked, ok := markGeneration(source, ct.marks+string(markGenOpen), ct.marks+string(markGenClose)); ok {
		if ct.gen, err = tplCompile(marked); err != nil {
			return nil, fmt.Errorf("chat template: its {%% generation %%} blocks: %w", err)
		}
	}
	return ct, nil
}

// ReadChatTemplate reads the chat template of a model or tokenizer: path
// is a tokenizer_config.json, a directory holding one (a checkpoint or
// tokenizer directory), or another file in such a directory (its
// tokenizer.json). A chat_template.jinja beside it, where newer
// transformers save the template, is preferred to the configuration's
// chat_template, which is a string or a list of named templates (the one
// named "default" is used). bos_token, eos_token, unk_token and pad_token
// come from the configuration, each a string or {"content": string}. The
// template's Name is the file it was read from.
func ReadChatTemplate(path string) (*ChatTemplate, error) {
	fail := func(p string, format string, args ...any) (*ChatTemplate, error) {
		return nil, fileErr("chat", p, format, args...)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, openErr("chat", path, err)
	}
	// A directory, or a file beside the configuration (tokenizer.json,
	// as -tokenizer names it), means the configuration in that directory.
	cfgPath, dir := path, filepath.Dir(path)
	if st.IsDir() {
		cfgPath, dir = filepath.Join(path, "tokenizer_config.json"), path
	} else if filepath.Base(path) != "tokenizer_config.json" {
		cfgPath = filepath.Join(dir, "tokenizer_config.json")
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, openErr("chat", cfgPath, err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fail(cfgPath, "invalid JSON: %v", err)
	}
	source, fromFile := "", false
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		source, fromFile = string(b), true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, openErr("chat", filepath.Join(dir, "chat_template.jinja"), err)
	} else if source, err = configTemplate(cfg["chat_template"]); err != nil {
		return fail(cfgPath, "%v", err)
	}
	if source == "" {
		return fail(cfgPath, "has no chat_template (and there is no chat_template.jinja beside it)")
	}
	special := map[string]string{}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		s, err := tokenString(cfg[k])
		if err != nil {
			return fail(cfgPath, "%s: %v", k, err)
		}
		if s != "" {
			special[k] = s
		}
	}
	t, err := NewChatTemplate(source, special["bos_token"], special["eos_token"])
	if err != nil {
		return fail(cfgPath, "%v", err)
	}
	t.Name = cfgPath
	if fromFile {
		t.Name = filepath.Join(dir, "chat_template.jinja")
	}
	delete(special, "bos_token")
	delete(special, "eos_token")
	if len(special) > 0 {
		t.Special = special
	}
	return t, nil
}

// configTemplate reads tokenizer_config.json's chat_template: a string, or
// a list of {"name", "template"} of which "default" is taken.
func configTemplate(raw json.RawMessage) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is %s, want a string or a list of named templates", jsonKind(raw))
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	names := make([]string, len(named))
	for i, n := range named {
		names[i] = n.Name
	}
	return "", fmt.Errorf("chat_template lists templates %q but none named \"default\"", names)
}

// tokenString reads a special token: a string, {"content": string} or null.
func tokenString(raw json.RawMessage) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != nil {
		return *o.Content, nil
	}
	return "", fmt.Errorf("is %s, want a string or {\"content\": string}", jsonKind(raw))
}

// Render renders a conversation; with addGenerationPrompt the template
// ends with what opens the assistant's turn (for generation). An error
// the template raises (raise_exception) comes back as an error.
func (t *ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	vals, err := messageValues(msgs)
	if err != nil {
		return "", err
	}
	return t.render(t.tmpl, vals, addGenerationPrompt)
}

// render runs tmpl (t's template, or t.gen) over messages, within the
// limits of variables of their size (tplDefaultLimits). Its errors name
// the template (where it has a Name).
func (t *ChatTemplate) render(tmpl *tplTemplate, msgs []jinja.Value, addGenerationPrompt bool) (string, error) {
	vars := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
	}
	if t.BOS != "" {
		vars["bos_token"] = jinja.NewString(t.BOS)
	}
	if t.EOS != "" {
		vars["eos_token"] = jinja.NewString(t.EOS)
	}
	for k, v := range t.Special {
		vars[k] = jinja.NewString(v)
	}
	for k, v := range t.vars {
		vars[k] = v
	}
	limits := tplDefaultLimits
	if t.limits != nil {
		limits = t.limits
	}
	s, err := tmpl.render(vars, limits(tplValueSize(vars)))
	if err != nil && t.Name == "" {
		return "", fmt.Errorf("chat template: %w", err)
	}
	if err != nil {
		return "", fmt.Errorf("chat template %s: %w", t.label(), err)
	}
	return s, nil
}

// messageValues turns messages into the values a template sees: each
// message's JSON object, its keys in their order.
func messageValues(msgs []Message) ([]jinja.Value, error) {
	vals := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		if m.Fields == nil {
			d := jinja.NewDict()
			d.AsDict().Set("role", jinja.NewString(m.Role))
			d.AsDict().Set("content", jinja.NewString(m.Content))
			vals[i] = d
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(m.Fields))
		dec.UseNumber()
		v, err := jsonValue(dec)
		if err != nil {
			return nil, fmt.Errorf("message %d: %v", i, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// jsonValue reads one JSON value from dec as a Jinja value, keeping the
// order of object keys (as Python's json module does, which is what
// transformers' templates see).
func jsonValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := jsonValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ]
			return jinja.NewList(items), err
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := jsonValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token() // }
			return d, err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", x)
	case nil:
		return jinja.None(), nil
	default:
		return jinja.FromGoValue(x), nil
	}
}

// The answers of a conversation (what -loss-on answers trains) are found
// in its rendering by what the template does to each message, from a
// constant number of renderings (the conversation plainly and marked; the
// messages before the first answer with and without the generation
// prompt; for a template with no generation prompt, two of one or two
// messages and at most one more of the conversation), never one per turn:
// a template may render a conversation's first turns differently once
// more follow (Llama 3's first template writes the assistant's header
// after every conversation, Qwen 3's drops the reasoning of the answers
// before the last question, Phi's writes an end of text after the last
// message, Mistral v0.3's and Nemo's write the system message into the
// last question).
//
// A template with {% generation %} blocks (transformers'
// return_assistant_tokens_mask; SmolLM3's) says what the model generates:
// the answers are what its blocks write, nothing added. Any other renders
// the conversation again with each assistant message's content wrapped in
// markers (a private-use character and a random nonce that neither the
// template nor the rendering holds), inside the content's leading and
// trailing whitespace so that a template that trims it (Llama 3's,
// Gemma's, Mistral v0.3's) trims the same. Without the markers that
// rendering must equal the plain one byte for byte and hold each marker at
// most once, in order: a template that rewrites, cuts, repeats or reorders
// an answer's content is refused, naming the template. A missing marker is
// content the template dropped (Qwen 3 keeps what follows </think> of an
// answer written <think>...</think>answer). An answer runs
//
//   - from the end of the generation prompt (what add_generation_prompt
//     adds after the messages before the first answer) where the template
//     writes it last before the content: what the template writes between
//     the two (Qwen 3's reasoning block, empty or not, the content's
//     leading whitespace) is answer, as the model generates it. Under a
//     template with no generation prompt (Mistral's, Llama 3's first) it
//     starts at the content, with the content's leading whitespace where
//     the template keeps that as it is, and the whitespace the template
//     writes before every answer (Mixtral's and Mistral v0.3's space);
//   - to the end of the first end-of-turn token after the content
//     (endsOfTurn, or the template's eos_token) and the new lines after it
//     (ChatML's, Gemma's, Phi 3's), or to the end of the content where
//     none follows before the next answer.
//
// An assistant message with no text content (tool calls only) has nothing
// to mark: its answer runs from the first generation prompt after the last
// answer to the end of turn after that, where both come before the next
// marked answer; under a template with no generation prompt it is not
// trained.

// Marker kinds: a marker is the template's marks (markLead and a nonce)
// and a kind; the content markers then carry the message's index and
// markTerm.
const (
	markLead     = '\uF8F0'
	markOpen     = '\uF8F1' // the start of an assistant message's content
	markTerm     = '\uF8F2'
	markShut     = '\uF8F3' // the end of an assistant message's content
	markGenOpen  = '\uF8F4' // {% generation %}
	markGenClose = '\uF8F5' // {% endgeneration %}
)

// endsOfTurn are the tokens with which the families' templates end a turn:
// Llama 3's <|eot_id|> (and <|eom_id|>), ChatML's <|im_end|> (Qwen,
// SmolLM), Gemma's <end_of_turn>, Phi 3's and 4's <|end|>, Mistral's and
// Llama 2's </s>, and the ends of text a template may write instead.
var endsOfTurn = []string{"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "</s>", "<|endoftext|>", "<|end_of_text|>"}

// newMarkPrefix returns markLead and a random nonce of private-use
// characters that source does not hold.
func newMarkPrefix(source string) string {
	for {
		var b [8]byte
		rand.Read(b[:])
		p := []rune{markLead}
		for _, x := range b {
			p = append(p, 0xE000+rune(x))
		}
		if s := string(p); !strings.Contains(source, s) {
			return s
		}
	}
}

// markGeneration rewrites source's {% generation %} and
// {% endgeneration %} tags (which the jinja library runs as no-ops) into
// statements that write open and close where they stand,
// {% if true %}open{% endif %}, the tag's whitespace control kept on the
// outer ends, so that, the markers removed, the rendering is unchanged. It
// reports whether source has such tags; comments, expressions and raw
// blocks are copied as they are.
func markGeneration(source, open, close string) (string, bool) {
	var b strings.Builder
	found := false
	for {
		i := strings.IndexByte(source, '{')
		if i < 0 || i+1 >= len(source) {
			b.WriteString(source)
			return b.String(), found
		}
		end := ""
		switch source[i+1] {
		case '#':
			end = "#}"
		case '{':
			end = "}}"
		case '%':
			end = "%}"
		default:
			b.WriteString(source[:i+1])
			source = source[i+1:]
			continue
		}
		j := strings.Index(source[i+2:], end)
		if j < 0 {
			b.WriteString(source)
			return b.String(), found
		}
		tag, rest := source[i:i+2+j+2], source[i+2+j+2:]
		b.WriteString(source[:i])
		source = rest
		if end != "%}" {
			b.WriteString(tag)
			continue
		}
		body := tag[2 : len(tag)-2]
		left, right := "", ""
		if body != "" && (body[0] == '-' || body[0] == '+') {
			left, body = body[:1], body[1:]
		}
		if n := len(body); n > 0 && (body[n-1] == '-' || body[n-1] == '+') {
			right, body = body[n-1:], body[:n-1]
		}
		switch strings.TrimSpace(body) {
		case "generation":
			b.WriteString("{%" + left + " if true %}" + open + "{% endif " + right + "%}")
			found = true
		case "endgeneration":
			b.WriteString("{%" + left + " if true %}" + close + "{% endif " + right + "%}")
			found = true
		case "raw":
			b.WriteString(tag)
			if loc := endRaw.FindStringIndex(source); loc != nil {
				b.WriteString(source[:loc[1]])
				source = source[loc[1]:]
			}
		default:
			b.WriteString(tag)
		}
	}
}

var endRaw = regexp.MustCompile(`\{%[-+]?\s*endraw\s*[-+]?%\}`)

// mark is a marker found in a rendering.
type mark struct {
	kind rune
	msg  int // the assistant message (content markers)
	at   int // where it stood in the rendering without markers
}

// unmark removes t's markers from s: the text without them, and the
// markers in order.
func (t *ChatTemplate) unmark(s string) (string, []mark, error) {
	var b strings.Builder
	var marks []mark
	for {
		i := strings.Index(s, t.marks)
		if i < 0 {
			b.WriteString(s)
			return b.String(), marks, nil
		}
		b.WriteString(s[:i])
		s = s[i+len(t.marks):]
		m := mark{msg: -1, at: b.Len()}
		var n int
		m.kind, n = utf8.DecodeRuneInString(s)
		s = s[n:]
		switch m.kind {
		case markGenOpen, markGenClose:
		case markOpen, markShut:
			j := strings.IndexRune(s, markTerm)
			k, err := strconv.Atoi(s[:max(j, 0)])
			if j < 1 || j > 9 || err != nil {
				return "", nil, t.spanErr("it cuts the markers of an answer short")
			}
			m.msg = k
			s = s[j+utf8.RuneLen(markTerm):]
		default:
			return "", nil, t.spanErr("it cuts the markers of an answer short")
		}
		marks = append(marks, m)
	}
}

// spanErr says why t's answers cannot be found.
func (t *ChatTemplate) spanErr(format string, args ...any) error {
	return fmt.Errorf("chat template %s: %s, so the answers' tokens cannot be found (train with -loss-on all)", t.label(), fmt.Sprintf(format, args...))
}

// label names t for messages: its file (and the key, chat_template, of
// a JSON file's), else its digest.
func (t *ChatTemplate) label() string {
	if strings.HasSuffix(t.Name, ".json") {
		return t.Name + ": chat_template"
	}
	if t.Name != "" {
		return t.Name
	}
	sum := sha256.Sum256([]byte(t.Source))
	return fmt.Sprintf("sha256:%x", sum[:6])
}

// differs describes where a rendering with markers removed (got) differs
// from the plain one.
func differs(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	near := func(s string) string {
		return strconv.Quote(s[max(i-20, 0):min(i+20, len(s))])
	}
	return fmt.Sprintf("with the answers marked it renders %s at byte %d where the plain rendering has %s", near(got), i, near(want))
}

// chatSpans renders a conversation and, when answers is set, finds the
// byte span of each answer in the rendering (see above).
func chatSpans(t *ChatTemplate, msgs []Message, answers bool) (string, [][2]int, error) {
	vals, err := messageValues(msgs)
	if err != nil {
		return "", nil, err
	}
	whole, err := t.render(t.tmpl, vals, false)
	if err != nil || !answers {
		return whole, nil, err
	}
	if strings.Contains(whole, t.marks) {
		return "", nil, t.spanErr("the record holds the characters that mark answers")
	}
	var spans [][2]int
	if t.gen != nil {
		spans, err = t.generationSpans(vals, whole)
	} else {
		spans, err = t.answerSpans(msgs, vals, whole)
	}
	if err != nil {
		return "", nil, err
	}
	return whole, spans, nil
}

// generationSpans returns what the {% generation %} blocks write.
func (t *ChatTemplate) generationSpans(vals []jinja.Value, whole string) ([][2]int, error) {
	s, err := t.render(t.gen, vals, false)
	if err != nil {
		return nil, fmt.Errorf("rendering with the generation blocks marked: %w", err)
	}
	plain, marks, err := t.unmark(s)
	if err != nil {
		return nil, err
	}
	if plain != whole {
		return nil, t.spanErr("its generation blocks change the rendering: %s", differs(plain, whole))
	}
	var spans [][2]int
	open := -1
	for _, m := range marks {
		switch {
		case m.kind == markGenOpen && open < 0:
			open = m.at
		case m.kind == markGenClose && open >= 0:
			if m.at > open {
				spans = append(spans, [2]int{open, m.at})
			}
			open = -1
		default:
			return nil, t.spanErr("it nests its generation blocks, or ends one it did not start")
		}
	}
	if open >= 0 {
		return nil, t.spanErr("it leaves a generation block open")
	}
	return spans, nil
}

// contentMarks is where an assistant message's markers stand in the
// rendering (-1 where the template dropped them).
type contentMarks struct {
	marked      bool   // the message's content was marked
	lead        string // the whitespace the content starts with
	start, stop int
}

// answerSpans finds the answers of a template without generation blocks
// by marking the assistant messages' content (see above).
func (t *ChatTemplate) answerSpans(msgs []Message, vals []jinja.Value, whole string) ([][2]int, error) {
	marked, cm := t.markContent(msgs, vals, false)
	s, err := t.render(t.tmpl, marked, false)
	if err != nil {
		return nil, fmt.Errorf("rendering with the answers marked: %w", err)
	}
	plain, marks, err := t.unmark(s)
	if err != nil {
		return nil, err
	}
	if plain != whole {
		return nil, t.spanErr("it changes the answers' content in a way the markers cannot follow: %s", differs(plain, whole))
	}
	for _, m := range marks {
		if m.msg < 0 || m.msg >= len(cm) || !cm[m.msg].marked || m.kind == markGenOpen || m.kind == markGenClose {
			return nil, t.spanErr("it writes a marker it was not given")
		}
		p := &cm[m.msg].start
		if m.kind == markShut {
			p = &cm[m.msg].stop
		}
		if *p >= 0 {
			return nil, t.spanErr("it writes message %d's content more than once", m.msg)
		}
		*p = m.at
	}
	prompt, first := t.generationPrompt(msgs, vals)
	opener := ""
	if prompt == "" && first > 0 {
		opener = t.opener(vals[first-1])
	}
	// keepsLead says whether the template writes the answers' leading
	// whitespace as it is (their content wrapped in markers outside it
	// renders the same), which a template with no generation prompt
	// needs to know; asked once.
	keeps := 0 // 1 yes, -1 no
	keepsLead := func() bool {
		if keeps == 0 {
			keeps = -1
			out, _ := t.markContent(msgs, vals, true)
			if s, err := t.render(t.tmpl, out, false); err == nil {
				if plain, _, err := t.unmark(s); err == nil && plain == whole {
					keeps = 1
				}
			}
		}
		return keeps > 0
	}
	// next[k] is where the first marked answer after message k starts.
	next := make([]int, len(cm))
	for k, at := len(cm)-1, len(whole); k >= 0; k-- {
		next[k] = at
		if c := cm[k]; c.start >= 0 {
			at = c.start
		} else if c.stop >= 0 {
			at = c.stop
		}
	}
	ends := endsOfTurn
	if t.EOS != "" {
		ends = append([]string{t.EOS}, endsOfTurn...)
	}
	var spans [][2]int
	done := 0 // the end of the last answer
	for k, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		c, limit := cm[k], next[k]
		if !c.marked {
			// No content to mark: the turn after the first generation
			// prompt, where one follows before the next marked answer.
			if prompt == "" || limit < done {
				continue
			}
			i := strings.Index(whole[done:limit], prompt)
			if i < 0 {
				continue
			}
			from := done + i + len(prompt)
			if end, ok := turnEnd(whole, from, limit, ends); ok {
				spans = append(spans, [2]int{from, end})
				done = end
			}
			continue
		}
		if c.start < 0 && c.stop < 0 {
			continue // the template leaves the message out
		}
		if c.stop < 0 {
			return nil, t.spanErr("it drops the end of message %d's content", k)
		}
		first := c.start
		if first < 0 {
			first = c.stop
		}
		if first < done || (c.start >= 0 && c.stop < c.start) || limit < c.stop {
			return nil, t.spanErr("it writes message %d's content out of order", k)
		}
		from := -1
		if prompt != "" {
			if i := strings.LastIndex(whole[done:first], prompt); i >= 0 {
				from = done + i + len(prompt)
			}
		}
		if from < 0 {
			if c.start < 0 {
				return nil, t.spanErr("it drops the start of message %d's content and writes no generation prompt before it", k)
			}
			from = c.start
			if c.lead != "" && strings.HasSuffix(whole[done:from], c.lead) && keepsLead() {
				from -= len(c.lead)
			}
			if opener != "" && strings.HasSuffix(whole[done:from], opener) {
				from -= len(opener)
			}
		}
		end, _ := turnEnd(whole, c.stop, limit, ends)
		spans = append(spans, [2]int{from, end})
		done = end
	}
	return spans, nil
}

// markContent returns the messages with each assistant message's content
// wrapped in its markers: a string, or from its first text part to its
// last. Inside the content's leading and trailing whitespace, so that a
// template that trims it trims the same; or, outside, around it. Content
// with no text is not marked.
func (t *ChatTemplate) markContent(msgs []Message, vals []jinja.Value, outside bool) ([]jinja.Value, []contentMarks) {
	out := slices.Clone(vals)
	cm := make([]contentMarks, len(msgs))
	// wrap marks text: as the first part (open), the last (shut), or both.
	wrap := func(text, open, shut string) (string, string) {
		lead, core, trail := splitSpace(text)
		if outside {
			return open + text + shut, lead
		}
		return lead + open + core + shut + trail, lead
	}
	for k, m := range msgs {
		cm[k] = contentMarks{start: -1, stop: -1}
		if m.Role != "assistant" || !vals[k].IsDict() {
			continue
		}
		open := t.marks + string(markOpen) + strconv.Itoa(k) + string(markTerm)
		shut := t.marks + string(markShut) + strconv.Itoa(k) + string(markTerm)
		content, _ := vals[k].AsDict().Get("content")
		switch {
		case content.IsString():
			if strings.TrimSpace(content.AsString()) == "" {
				continue
			}
			text, lead := wrap(content.AsString(), open, shut)
			out[k] = withKey(vals[k], "content", jinja.NewString(text))
			cm[k].marked, cm[k].lead = true, lead
		case content.IsList():
			items := content.AsList().Items
			first, last := -1, -1
			for i, it := range items {
				if text, ok := partText(it); ok && strings.TrimSpace(text) != "" {
					if first < 0 {
						first = i
					}
					last = i
				}
			}
			if first < 0 {
				continue
			}
			parts := slices.Clone(items)
			text, _ := partText(items[first])
			if first == last {
				text, cm[k].lead = wrap(text, open, shut)
				parts[first] = withKey(items[first], "text", jinja.NewString(text))
			} else {
				text, cm[k].lead = wrap(text, open, "")
				parts[first] = withKey(items[first], "text", jinja.NewString(text))
				text, _ = partText(items[last])
				text, _ = wrap(text, "", shut)
				parts[last] = withKey(items[last], "text", jinja.NewString(text))
			}
			out[k] = withKey(vals[k], "content", jinja.NewList(parts))
			cm[k].marked = true
		}
	}
	return out, cm
}

// partText returns the text of a {"type": "text", "text": ...} part.
func partText(v jinja.Value) (string, bool) {
	if !v.IsDict() {
		return "", false
	}
	d := v.AsDict()
	typ, _ := d.Get("type")
	text, _ := d.Get("text")
	if !typ.IsString() || typ.AsString() != "text" || !text.IsString() {
		return "", false
	}
	return text.AsString(), true
}

// withKey returns a copy of dict d with key set to v, in its place.
func withKey(d jinja.Value, key string, v jinja.Value) jinja.Value {
	nd := jinja.NewDict()
	for _, k := range d.AsDict().Keys {
		nd.AsDict().Set(k, d.AsDict().Data[k])
	}
	nd.AsDict().Set(key, v)
	return nd
}

// splitSpace splits s into its leading whitespace, the rest but its
// trailing whitespace, and that.
func splitSpace(s string) (lead, core, trail string) {
	core = strings.TrimLeftFunc(s, unicode.IsSpace)
	lead = s[:len(s)-len(core)]
	trimmed := strings.TrimRightFunc(core, unicode.IsSpace)
	return lead, trimmed, core[len(trimmed):]
}

// generationPrompt returns what add_generation_prompt adds to the
// conversation before its first assistant message, k ("" where that is
// the first message, or the template adds nothing): the end of the
// rendering with it past the longest start it shares with the rendering
// without.
func (t *ChatTemplate) generationPrompt(msgs []Message, vals []jinja.Value) (prompt string, k int) {
	k = slices.IndexFunc(msgs, func(m Message) bool { return m.Role == "assistant" })
	if k < 1 {
		return "", k
	}
	with, err := t.render(t.tmpl, vals[:k], true)
	if err != nil {
		return "", k
	}
	without, err := t.render(t.tmpl, vals[:k], false)
	if err != nil {
		return "", k
	}
	n := 0
	for n < len(with) && n < len(without) && with[n] == without[n] {
		n++
	}
	for n > 0 && n < len(with) && !utf8.RuneStart(with[n]) {
		n--
	}
	return with[n:], k
}

// opener returns, for a template with no generation prompt (Mistral's,
// Llama 3's first), the whitespace it writes to open an answer before its
// content, as Mixtral's and Mistral v0.3's space, which the model
// generates: in the conversation of before (the message before the first
// answer) and an answer of marked content, what follows the rendering of
// before alone, where that is a prefix and all whitespace (not a header,
// which is prompt); else "".
func (t *ChatTemplate) opener(before jinja.Value) string {
	open := t.marks + string(markOpen) + "0" + string(markTerm)
	answer := jinja.NewDict()
	answer.AsDict().Set("role", jinja.NewString("assistant"))
	answer.AsDict().Set("content", jinja.NewString(open+"A"+t.marks+string(markShut)+"0"+string(markTerm)))
	alone, err := t.render(t.tmpl, []jinja.Value{before}, false)
	if err != nil {
		return ""
	}
	both, err := t.render(t.tmpl, []jinja.Value{before, answer}, false)
	if err != nil {
		return ""
	}
	i := strings.Index(both, open)
	if i < len(alone) || !strings.HasPrefix(both, alone) || strings.TrimSpace(both[len(alone):i]) != "" {
		return ""
	}
	return both[len(alone):i]
}

// turnEnd returns the end of the turn whose content ends at from: the end
// of the first of ends in text[from:limit] and of the new lines after it
// (up to limit); from and false when none of ends is there.
func turnEnd(text string, from, limit int, ends []string) (int, bool) {
	at, size := -1, 0
	for _, e := range ends {
		i := strings.Index(text[from:limit], e)
		if i >= 0 && (at < 0 || i < at || i == at && len(e) > size) {
			at, size = i, len(e)
		}
	}
	if at < 0 {
		return from, false
	}
	end := from + at + size
	for end < limit && (text[end] == '\n' || text[end] == '\r') {
		end++
	}
	return end, true
}
