package data

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// familyEnc is a byte tokenizer (every byte boundary a token boundary, so
// that labels are checked to the byte) with the special tokens of the
// families' templates.
var familyEnc = byteEncoder{specials: []string{
	"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|end_of_text|>",
	"<|im_start|>", "<|im_end|>", "<s>", "</s>", "[INST]", "[/INST]",
	"<bos>", "<start_of_turn>", "<end_of_turn>",
	"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>",
}}

// The fixtures' answers (scripts/chat-fixtures.js).
const (
	ansParis   = "The capital of France is Paris."
	ansBerlin  = "Berlin."
	ansRome    = "Rome."
	ansGruesse = "Grüße aus Köln — déjà vu, 東京 😀."
)

// TestAnswersInFamilyTemplates trains on the answers of multi-turn
// conversations under the real templates of the families memfit trains,
// rendered as the reference renders them, and checks the text of each
// trained run: the answer as the template writes it (trimmed where it
// trims, with the reasoning block where it keeps one) and its end of turn
// (the new line after it where the template writes one), nothing of the
// prompts, headers or system messages. A {% generation %} template
// (SmolLM3's) trains what its blocks write.
func TestAnswersInFamilyTemplates(t *testing.T) {
	eot := func(end string, answers ...string) string {
		for i := range answers {
			answers[i] += end
		}
		return strings.Join(answers, "|")
	}
	gruesse := "\n  " + ansGruesse + "  " // the answer untrimmed
	im := "<|im_end|>\n"
	noThink := "<think>\n\n</think>\n\n" // Qwen 3's last answer without reasoning
	smol := func(answers ...string) string {
		for i := range answers {
			answers[i] = "<|im_start|>assistant\n" + answers[i]
		}
		return eot(im, answers...)
	}
	type want map[string]string // case name -> trained runs, joined by "|"
	cases := map[string]want{
		// Llama 3: the first template writes the assistant's header after
		// every conversation, and each answer is found all the same.
		"llama3-first": {
			"system and three turns": eot("<|eot_id|>", ansParis, ansBerlin, ansRome),
			"two turns":              eot("<|eot_id|>", ansParis, ansBerlin),
			"whitespace and unicode": eot("<|eot_id|>", ansGruesse, ansParis),
		},
		"llama3": {
			"system and three turns": eot("<|eot_id|>", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|eot_id|>", ansGruesse, ansParis),
		},
		"llama3.1": {
			"system and three turns": eot("<|eot_id|>", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|eot_id|>", ansGruesse, ansParis),
		},
		"llama3.2": {
			"system and three turns": eot("<|eot_id|>", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|eot_id|>", ansGruesse, ansParis),
		},
		// Mistral: no generation prompt; the space Mixtral and v0.3 write
		// before an answer is the answer's. v0.3 and Nemo put the system
		// message in the last question.
		"mistral": {
			"two turns":              eot("</s>", ansParis, ansBerlin),
			"whitespace and unicode": eot("</s>", gruesse, ansParis),
		},
		"mixtral": {
			"system and three turns": eot("</s>", " "+ansParis, " "+ansBerlin, " "+ansRome),
			"whitespace and unicode": eot("</s>", " "+gruesse, " "+ansParis),
		},
		"mistral-v0.3": {
			"system and three turns": eot("</s>", " "+ansParis, " "+ansBerlin, " "+ansRome),
			"two turns":              eot("</s>", " "+ansParis, " "+ansBerlin),
			"whitespace and unicode": eot("</s>", " "+ansGruesse, " "+ansParis),
		},
		"mistral-nemo": {
			"system and three turns": eot("</s>", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("</s>", gruesse, ansParis),
		},
		// ChatML.
		"chatml": {
			"system and three turns": eot(im, ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot(im, gruesse, ansParis),
		},
		"qwen2": {
			"system and three turns": eot(im, ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot(im, gruesse, ansParis),
		},
		"qwen2.5": {
			"system and three turns": eot(im, ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot(im, gruesse, ansParis),
			// An answer that is a tool call only.
			"tool call": eot(im, "<tool_call>\n{\"name\": \"capital\", \"arguments\": {\"country\": \"France\"}}\n</tool_call>", ansParis),
		},
		"smollm2": {
			"system and three turns": eot(im, ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot(im, gruesse, ansParis),
		},
		// Qwen 3 writes a reasoning block in the answers after the last
		// question (empty where the answer has none) and drops it from
		// those before: the block the template writes is trained.
		"qwen3": {
			"system and three turns":     eot(im, ansParis, ansBerlin, noThink+ansRome),
			"whitespace and unicode":     eot(im, gruesse, noThink+ansParis),
			"reasoning in the last turn": eot(im, ansParis, "<think>\nGermany's capital is Berlin.\n</think>\n\nBerlin."),
			"reasoning in every turn":    eot(im, "Paris.", "Berlin.", "<think>\nItaly: Rome.\n</think>\n\nRome."),
			"reasoning_content":          eot(im, "Paris.", "<think>\nGermany: Berlin.\n</think>\n\nBerlin."),
		},
		// SmolLM3's {% generation %} blocks hold the whole turn, its
		// header included, and it keeps reasoning in every answer.
		"smollm3": {
			"system and three turns":  smol(ansParis, ansBerlin, ansRome),
			"reasoning in every turn": smol("<think>\nFrance: Paris.\n</think>\n\nParis.", "<think>\nGermany: Berlin.\n</think>\n\nBerlin.", "<think>\nItaly: Rome.\n</think>\n\nRome."),
			"reasoning_content":       smol("Paris.", "Berlin."),
		},
		// Gemma folds the system message into the first question, trims
		// the answers, and Gemma 3's later template reads parts.
		"gemma2": {
			"two turns":              eot("<end_of_turn>\n", ansParis, ansBerlin),
			"whitespace and unicode": eot("<end_of_turn>\n", ansGruesse, ansParis),
		},
		"gemma3": {
			"system and three turns": eot("<end_of_turn>\n", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<end_of_turn>\n", ansGruesse, ansParis),
		},
		"gemma3-it": {
			"system and three turns": eot("<end_of_turn>\n", ansParis, ansBerlin, ansRome),
			"answer as parts":        eot("<end_of_turn>\n", "The capitalis Paris.", ansBerlin),
		},
		// Phi: the end of text after the last turn is not the answer's.
		"phi3": {
			"system and three turns": eot("<|end|>\n", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|end|>\n", gruesse, ansParis),
		},
		"phi3.5": {
			"system and three turns": eot("<|end|>\n", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|end|>\n", gruesse, ansParis),
		},
		"phi4-mini": {
			"system and three turns": eot("<|end|>", ansParis, ansBerlin, ansRome),
			"whitespace and unicode": eot("<|end|>", gruesse, ansParis),
		},
	}
	fixtures := map[string]chatFixture{}
	for _, fx := range loadChatFixtures(t) {
		fixtures[fx.name] = fx
	}
	for name, want := range cases {
		fx, ok := fixtures[name]
		if !ok {
			t.Errorf("no chat fixture %q", name)
			continue
		}
		ct := fx.template(t)
		seen := 0
		for _, c := range fx.Cases {
			runs, ok := want[c.Name]
			if !ok {
				continue
			}
			seen++
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				if c.Expected == nil {
					t.Fatalf("the reference raised %q", c.Error)
				}
				ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: fixtureMessages(t, c.Messages)}, familyEnc, SFTOptions{Template: ct})
				if err != nil {
					t.Fatal(err)
				}
				if got := familyEnc.decode(ex.Tokens); got != *c.Expected {
					t.Errorf("tokens\n%q\nwant the reference rendering\n%q", got, *c.Expected)
				}
				if got := familyEnc.trainedText(ex); got != runs {
					t.Errorf("trained\n%q\nwant\n%q", got, runs)
				}
			})
		}
		if seen != len(want) {
			t.Errorf("%s: %d of %d cases found in the fixture", name, seen, len(want))
		}
	}
}

// TestAnswersSmolLM3KeepsSpaces: SmolLM3's content.lstrip("\n") strips the
// new line before an answer and keeps the spaces after it (as Python does;
// the reference renderer strips both, so the fixture leaves the case out).
func TestAnswersSmolLM3KeepsSpaces(t *testing.T) {
	ct := fixture(t, "smollm3").template(t)
	msgs := []Message{{Role: "user", Content: "Q"}, {Role: "assistant", Content: "\n  A  "}}
	ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: msgs}, familyEnc, SFTOptions{Template: ct})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := familyEnc.trainedText(ex), "<|im_start|>assistant\n  A  <|im_end|>\n"; got != want {
		t.Errorf("trained %q, want %q", got, want)
	}
}

// TestAnswersWithoutPrefixes: the answers of a template whose rendering of
// the first turns is not a prefix of the whole conversation's are found:
// one that writes something after the last message only, and Mistral
// v0.3's, which writes the system message into the last question.
func TestAnswersWithoutPrefixes(t *testing.T) {
	conv := []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "q2"}, {Role: "assistant", Content: "b"}}
	ct := mustTemplate(t, `{% for m in messages %}{{ m.role }}:{{ m.content }}{% if loop.last %}!{% endif %};{% endfor %}`)
	ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{Template: ct})
	if err != nil {
		t.Fatal(err)
	}
	// No end-of-turn token: the answers are the content.
	if got := chatEnc.trainedText(ex); got != "a|b" {
		t.Errorf("trained %q, want %q", got, "a|b")
	}
	v3 := fixture(t, "mistral-v0.3").template(t)
	sys := append([]Message{{Role: "system", Content: "S"}}, conv...)
	ex, err = TokenizeRecord(Record{Format: FormatChat, Messages: sys}, familyEnc, SFTOptions{Template: v3})
	if err != nil {
		t.Fatal(err)
	}
	// The system message goes into the last question when it is the last
	// message; else nowhere. The first answer's prompt rendered alone
	// holds it: no prefix.
	if got, want := familyEnc.decode(ex.Tokens), "<s>[INST] q[/INST] a</s>[INST] q2[/INST] b</s>"; got != want {
		t.Errorf("tokens %q, want %q", got, want)
	}
	if got, want := familyEnc.trainedText(ex), " a</s>| b</s>"; got != want {
		t.Errorf("trained %q, want %q", got, want)
	}
	if _, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{Template: ct, LossOn: LossAll}); err != nil {
		t.Errorf("loss on all: %v", err)
	}
	if _, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{}); err == nil || !strings.Contains(err.Error(), "chat template") {
		t.Errorf("chat without a template: %v", err)
	}
}

// TestAnswersRefuseManglingTemplates: a template that changes an answer's
// content so that it cannot be followed (cuts it, writes it twice) is
// refused, the error naming the record and the template; one that only
// changes its case is not.
func TestAnswersRefuseManglingTemplates(t *testing.T) {
	chat := `{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "an answer"}]}`
	for _, c := range []struct{ name, tmpl, err string }{
		{"cut", `{% for m in messages %}{{ m.role }}: {{ m.content[:4] }}<|im_end|>{% endfor %}`, "changes the answers' content"},
		{"twice", `{% for m in messages %}{{ m.content }} ({{ m.content }})<|im_end|>{% endfor %}`, "writes message 1's content more than once"},
		{"reversed", `{% for m in messages %}{{ m.content|reverse }}<|im_end|>{% endfor %}`, "answers' tokens cannot be found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, _ := json.Marshal(map[string]string{"chat_template": c.tmpl})
			cfgPath := writeFile(t, filepath.Join(dir, "model", "tokenizer_config.json"), cfg)
			ct, err := ReadChatTemplate(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			p := writeFile(t, filepath.Join(dir, "c.jsonl"), []byte(`{"messages": [{"role": "user", "content": "q"}]}`+"\n"+chat+"\n"))
			_, err = OpenSFT(p, chatEnc, SFTOptions{Context: 64, Template: ct}, CacheDir(filepath.Join(dir, "cache")))
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range []string{p + ": line 2: ", "chat template " + cfgPath, c.err, "-loss-on all"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			// Trained on all tokens, the template is fine.
			d, err := OpenSFT(p, chatEnc, SFTOptions{Context: 64, Template: ct, LossOn: LossAll}, CacheDir(filepath.Join(dir, "cache")))
			if err != nil {
				t.Fatal(err)
			}
			d.Close()
		})
	}
	ct := mustTemplate(t, `{% for m in messages %}{{ m.content|upper }}<|im_end|>{% endfor %}`)
	ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "an answer"}}}, chatEnc, SFTOptions{Template: ct})
	if err != nil {
		t.Fatal(err)
	}
	if got := chatEnc.trainedText(ex); got != "AN ANSWER<|im_end|>" {
		t.Errorf("trained %q", got)
	}
}

// TestAnswersGenerationBlocks: a template with {% generation %} blocks
// trains what they write (transformers' return_assistant_tokens_mask),
// whatever the role and whitespace control; blocks in comments and raw
// blocks are text; blocks left open or nested are refused.
func TestAnswersGenerationBlocks(t *testing.T) {
	conv := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: " A1 "},
		{Role: "user", Content: "Q2"}, {Role: "assistant", Content: "A2"}}
	for _, c := range []struct{ name, tmpl, text, trained string }{
		{"chatml", "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}{{ m.content|trim }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}{{ '\\n' }}{% endfor %}",
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n",
			"A1<|im_end|>|A2<|im_end|>"},
		{"whitespace control", "{%- for m in messages %}\n  {%- if m.role == 'assistant' %}\n    {%- generation -%}\n      [{{ m.content }}]\n    {%- endgeneration %}\n  {%- else %}{{ m.content }}{% endif %}\n{%- endfor %}",
			"SQ1[ A1 ]Q2[A2]", "[ A1 ]|[A2]"},
		{"lines", "{% for m in messages %}\n  {% if m.role != 'assistant' %}\n  {{ m.content }}\n  {% else %}\n  {% generation %}\n  {{ m.content }}\n  {% endgeneration %}\n  {% endif %}\n{% endfor %}",
			"  S\n  Q1\n   A1 \n  Q2\n  A2\n", "   A1 \n|  A2\n"},
		{"comments and raw", "{# {% generation %} #}{% raw %}{% generation %}{% endraw %}{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
			"{% generation %}SQ1 A1 Q2A2", "SQ1 A1 Q2A2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct := mustTemplate(t, c.tmpl)
			if ct.gen == nil {
				t.Fatal("no generation blocks found")
			}
			ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{Template: ct})
			if err != nil {
				t.Fatal(err)
			}
			if got := chatEnc.decode(ex.Tokens); got != c.text {
				t.Errorf("tokens\n%q\nwant\n%q", got, c.text)
			}
			if got := chatEnc.trainedText(ex); got != c.trained {
				t.Errorf("trained %q, want %q", got, c.trained)
			}
		})
	}
	for _, c := range []struct{ name, tmpl, err string }{
		{"nested", "{% generation %}{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}{% endgeneration %}", "nests its generation blocks"},
	} {
		ct := mustTemplate(t, c.tmpl)
		if _, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, chatEnc, SFTOptions{Template: ct}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
	}
}

// TestAnswersGenerationBlocksAgree: Llama 3's template with generation
// blocks around what it writes for an answer (as TRL's training template
// puts them) trains what the markers find in the template without them.
func TestAnswersGenerationBlocksAgree(t *testing.T) {
	const plain = `{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' }}{{ m.content | trim + '<|eot_id|>' }}{% endfor %}`
	const gen = `{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' }}{% if m.role == 'assistant' %}{% generation %}{{ m.content | trim + '<|eot_id|>' }}{% endgeneration %}{% else %}{{ m.content | trim + '<|eot_id|>' }}{% endif %}{% endfor %}`
	fx := fixture(t, "llama3.1")
	for _, c := range fx.Cases {
		if c.Expected == nil || c.AGP {
			continue
		}
		rec := Record{Format: FormatChat, Messages: fixtureMessages(t, c.Messages)}
		a, err := TokenizeRecord(rec, familyEnc, SFTOptions{Template: mustTemplate(t, plain)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := TokenizeRecord(rec, familyEnc, SFTOptions{Template: mustTemplate(t, gen)})
		if err != nil {
			t.Fatal(err)
		}
		if x, y := familyEnc.trainedText(a), familyEnc.trainedText(b); x != y || x == "" {
			t.Errorf("%s: markers train %q, generation blocks %q", c.Name, x, y)
		}
	}
}

// TestMarkGeneration: the rewrite keeps a tag's whitespace control on the
// statements' outer ends and leaves comments, expressions and raw blocks.
func TestMarkGeneration(t *testing.T) {
	for _, c := range []struct {
		src, want string
		found     bool
	}{
		{"a{% generation %}b{% endgeneration %}c", "a{% if true %}<{% endif %}b{% if true %}>{% endif %}c", true},
		{"{%- generation -%}{%-endgeneration+%}", "{%- if true %}<{% endif -%}{%- if true %}>{% endif +%}", true},
		{"{# {% generation %} #}{{ '{% generation %}' }}", "{# {% generation %} #}{{ '{% generation %}' }}", false},
		{"{% raw %}{% generation %}{% endraw %}{%generation%}", "{% raw %}{% generation %}{% endraw %}{% if true %}<{% endif %}", true},
		{"{% if add_generation_prompt %}x{% endif %}{", "{% if add_generation_prompt %}x{% endif %}{", false},
		{"{% generation", "{% generation", false},
	} {
		got, found := markGeneration(c.src, "<", ">")
		if got != c.want || found != c.found {
			t.Errorf("markGeneration(%q) = %q, %v; want %q, %v", c.src, got, found, c.want, c.found)
		}
	}
}

// TestAnswersRenderAConstantNumberOfTimes: finding the answers of a long
// conversation renders it (or a few of its messages) a few times, not once
// a turn.
func TestAnswersRenderAConstantNumberOfTimes(t *testing.T) {
	for _, name := range []string{"qwen3", "smollm3", "mistral-v0.3"} {
		fx := fixture(t, name)
		src := "{{ count() }}" + fx.Template
		fx.Template = src
		ct := fx.template(t)
		renders := 0
		ct.vars["count"] = jinja.NewCallable("count", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
			renders++
			return jinja.NewString(""), nil
		})
		var conv []Message
		for i := range 50 {
			conv = append(conv, Message{Role: "user", Content: "question " + strings.Repeat("?", i)}, Message{Role: "assistant", Content: "answer " + strings.Repeat("!", i)})
		}
		ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: conv}, familyEnc, SFTOptions{Template: ct})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		for i, l := range ex.Labels {
			if l != IgnoreIndex && (i == 0 || ex.Labels[i-1] == IgnoreIndex) {
				runs++
			}
		}
		if runs != 50 {
			t.Errorf("%s: %d answers trained, want 50", name, runs)
		}
		if renders > 8 {
			t.Errorf("%s: rendered %d times for 50 turns", name, renders)
		}
	}
}

// TestAnswersOddContent: answers that are empty, all whitespace, hold
// end-of-turn tokens, reasoning tags or a private-use character, under
// every family's template, give spans in order within the rendering (or
// an error), never a panic; an answer with text is trained.
func TestAnswersOddContent(t *testing.T) {
	odd := []string{"", " ", "\n\n", "x", "  x  ", "a</s>b", "a<|im_end|>\nb", "<think>r</think>", "<think>\nr\n</think>\n\nx", "x\n</think>y", "\uF8F0x\uF8F2", "<|eot_id|>"}
	for _, fx := range loadChatFixtures(t) {
		ct := fx.template(t)
		for i, a := range odd {
			b := odd[(i*5+3)%len(odd)]
			msgs := []Message{{Role: "user", Content: "q1"}, {Role: "assistant", Content: a}, {Role: "user", Content: "q2"}, {Role: "assistant", Content: b}}
			text, spans, err := chatSpans(ct, msgs, true)
			if err != nil {
				continue // a template may refuse (Gemma 2 has no system role, ...)
			}
			last := 0
			for _, s := range spans {
				if s[0] < last || s[1] < s[0] || s[1] > len(text) {
					t.Errorf("%s: answers %q, %q: spans %v out of order in %d bytes", fx.name, a, b, spans, len(text))
					break
				}
				last = s[1]
			}
			if strings.TrimSpace(b) == "x" && len(spans) == 0 {
				t.Errorf("%s: answers %q, %q: nothing trained", fx.name, a, b)
			}
		}
	}
}
