package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// chatFixture is one file of data/testdata/chat, written by
// scripts/chat-fixtures.sh with the reference renderer.
type chatFixture struct {
	name     string
	Source   string  `json:"source"`
	Template string  `json:"chat_template"`
	BOS      *string `json:"bos_token"`
	EOS      *string `json:"eos_token"`
	// Variables are more variables the template is rendered with
	// (Llama 3.2's date_string), and StrftimeNow what strftime_now
	// gives (SmolLM3's date), pinned where the template would read the
	// clock.
	Variables   map[string]string `json:"variables"`
	StrftimeNow string            `json:"strftime_now"`
	Tokenizer   string            `json:"tokenizer"`
	Cases       []struct {
		Name     string            `json:"name"`
		Messages []json.RawMessage `json:"messages"`
		AGP      bool              `json:"add_generation_prompt"`
		Expected *string           `json:"expected"`
		Error    string            `json:"error"`
		IDs      []int             `json:"ids"`
	} `json:"cases"`
}

func loadChatFixtures(t testing.TB) []chatFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "chat", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no chat fixtures: %v", err)
	}
	var out []chatFixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx chatFixture
		if err := json.Unmarshal(b, &fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		fx.name = strings.TrimSuffix(filepath.Base(f), ".json")
		out = append(out, fx)
	}
	return out
}

func (fx chatFixture) template(t testing.TB) *ChatTemplate {
	t.Helper()
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	ct, err := NewChatTemplate(fx.Template, str(fx.BOS), str(fx.EOS))
	if err != nil {
		t.Fatalf("%s: %v", fx.name, err)
	}
	ct.Name = fx.name
	ct.vars = map[string]jinja.Value{}
	for k, v := range fx.Variables {
		ct.vars[k] = jinja.NewString(v)
	}
	if day := fx.StrftimeNow; day != "" {
		ct.vars["strftime_now"] = jinja.NewCallable("strftime_now", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(day), nil
		})
	}
	return ct
}

// fixture returns the chat fixture called name.
func fixture(t testing.TB, name string) chatFixture {
	t.Helper()
	for _, fx := range loadChatFixtures(t) {
		if fx.name == name {
			return fx
		}
	}
	t.Fatalf("no chat fixture %q", name)
	return chatFixture{}
}

// fixtureMessages decodes a case's messages as a record's.
func fixtureMessages(t testing.TB, raw []json.RawMessage) []Message {
	t.Helper()
	b, _ := json.Marshal(raw)
	msgs, err := decodeMessages(b)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestChatTemplatesMatchReference renders every fixture's conversations
// and compares with @huggingface/jinja's output, byte for byte, and its
// raised errors: Llama 3 (its first template and the later one), 3.1 and
// 3.2, Mistral, Mixtral, Mistral v0.3 and Nemo, ChatML (plain, Qwen 2's,
// SmolLM2's), Qwen 2.5 and 3, Gemma 2 and 3 (two templates), Phi-3, 3.5
// and 4-mini, and SmolLM3.
func TestChatTemplatesMatchReference(t *testing.T) {
	for _, fx := range loadChatFixtures(t) {
		ct := fx.template(t)
		for _, c := range fx.Cases {
			t.Run(fx.name+"/"+c.Name, func(t *testing.T) {
				got, err := ct.Render(fixtureMessages(t, c.Messages), c.AGP)
				switch {
				case c.Expected == nil && err == nil:
					t.Errorf("rendered %q, want the error %q", got, c.Error)
				case c.Expected == nil && !strings.Contains(err.Error(), c.Error):
					t.Errorf("error %q, want %q", err, c.Error)
				case c.Expected != nil && err != nil:
					t.Errorf("error %v, want %q", err, *c.Expected)
				case c.Expected != nil && got != *c.Expected:
					t.Errorf("rendered\n%q\nwant\n%q", got, *c.Expected)
				}
			})
		}
	}
}

func TestChatTemplateKeepsKeyOrder(t *testing.T) {
	ct, err := NewChatTemplate(`{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	msgs := fixtureMessages(t, []json.RawMessage{
		json.RawMessage(`{"role": "user", "name": "ann", "content": "hi"}`),
		json.RawMessage(`{"content": "yo", "role": "assistant"}`),
	})
	got, err := ct.Render(append(msgs, Message{Role: "user", Content: "plain"}), false)
	if want := "role=user;name=ann;content=hi;content=yo;role=assistant;role=user;content=plain;"; err != nil || got != want {
		t.Errorf("rendered %q (%v), want %q", got, err, want)
	}
}

func TestReadChatTemplate(t *testing.T) {
	const tmpl = `{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}{{ pad_token }}`
	msgs := []Message{{Role: "user", Content: "hi"}}
	cases := []struct {
		name, config, jinja string
		want                string // rendering, or the error
		fails               bool
	}{
		{"string", `{"chat_template": ` + quote(tmpl) + `, "bos_token": "<s>", "eos_token": "</s>"}`, "", "<s>user: hi</s>", false},
		{"token objects", `{"chat_template": ` + quote(tmpl) + `, "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null, "pad_token": "<pad>"}`, "", "<s>user: hi<pad>", false},
		{"named templates", `{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": ` + quote(tmpl) + `}], "eos_token": "!"}`, "", "user: hi!", false},
		{"chat_template.jinja", `{"chat_template": "ignored", "bos_token": "B"}`, "J{{ bos_token }}", "JB", false},
		{"no template", `{"bos_token": "<s>"}`, "", "has no chat_template", true},
		{"no default", `{"chat_template": [{"name": "rag", "template": "x"}]}`, "", `none named "default"`, true},
		{"bad token", `{"chat_template": "x", "eos_token": 5}`, "", "eos_token: is a number", true},
		{"bad JSON", `{"chat_template": `, "", "invalid JSON", true},
		{"bad template", `{"chat_template": "{% for %}"}`, "", "chat template", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeFile(t, filepath.Join(dir, "tokenizer_config.json"), []byte(c.config))
			if c.jinja != "" {
				writeFile(t, filepath.Join(dir, "chat_template.jinja"), []byte(c.jinja))
			}
			tj := writeFile(t, filepath.Join(dir, "tokenizer.json"), []byte("{}"))
			for _, path := range []string{dir, cfg, tj} {
				ct, err := ReadChatTemplate(path)
				if c.fails {
					if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), cfg) {
						t.Errorf("%s: error %v, want %q naming %s", path, err, c.want, cfg)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if got, err := ct.Render(msgs, false); err != nil || got != c.want {
					t.Errorf("%s: rendered %q (%v), want %q", path, got, err, c.want)
				}
			}
		})
	}
	if _, err := ReadChatTemplate(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing path: %v", err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
