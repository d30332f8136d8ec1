package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	// BOS and EOS are the bos_token and eos_token strings ("" when the
	// configuration names none: the variable is then undefined).
	BOS, EOS string
	// Special holds the other special-token variables (unk_token,
	// pad_token) that the configuration names.
	Special map[string]string

	tmpl *jinja.Template
}

// NewChatTemplate compiles a chat template; bos and eos become bos_token
// and eos_token ("" leaves them undefined).
func NewChatTemplate(source, bos, eos string) (*ChatTemplate, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &ChatTemplate{Source: source, BOS: bos, EOS: eos, tmpl: t}, nil
}

// ReadChatTemplate reads the chat template of a model or tokenizer: path
// is a tokenizer_config.json, a directory holding one (a checkpoint or
// tokenizer directory), or another file in such a directory (its
// tokenizer.json). A chat_template.jinja beside it, where newer
// transformers save the template, is preferred to the configuration's
// chat_template, which is a string or a list of named templates (the one
// named "default" is used). bos_token, eos_token, unk_token and pad_token
// come from the configuration, each a string or {"content": string}.
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
	source := ""
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		source = string(b)
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
	return t.render(vals, addGenerationPrompt)
}

func (t *ChatTemplate) render(msgs []jinja.Value, addGenerationPrompt bool) (string, error) {
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
	s, err := t.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
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
