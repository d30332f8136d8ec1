package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/regularfile"
)

// namedFile is a companion file of an export: its name in the directory
// and its bytes.
type namedFile struct {
	name string
	data []byte
}

// maxCompanion bounds a companion file read from a tokenizer's or a
// model's directory (the tokenizer package's bound on tokenizer.json:
// Gemma 3's is about 33 MB).
const maxCompanion = 128 << 20

// tokenIDKeys are the config.json keys an export takes from the model it
// was initialized from: transformers' generate and vLLM read them there.
var tokenIDKeys = []string{"bos_token_id", "eos_token_id", "pad_token_id"}

// companionFiles reads what o says goes beside the weights: the
// tokenizer's files (o.Tokenizer's directory, or the directory of a
// tokenizer.json it names), with o.ChatTemplate written into
// tokenizer_config.json when the tokenizer brings none; and from o.From
// (the directory the model was initialized from) its token ids, copied
// into cfg, and its generation_config.json, or one made of those ids. A
// file that is not there is no error; one that cannot be read is, naming
// it.
func (o SaveOptions) companionFiles(cfg map[string]any) ([]namedFile, error) {
	var files []namedFile
	read := func(path string) ([]byte, error) {
		b, err := regularfile.Read(path, maxCompanion)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("hf: %v", err)
		}
		return b, nil
	}
	if dir := o.Tokenizer; dir != "" {
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			dir = filepath.Dir(dir)
		}
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"} {
			b, err := read(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			if b != nil {
				files = append(files, namedFile{name, b})
			}
		}
	}
	if o.ChatTemplate != "" {
		var err error
		if files, err = withTemplate(files, o.ChatTemplate); err != nil {
			return nil, err
		}
	}
	ids := map[string]any{}
	if o.From != "" {
		b, err := read(filepath.Join(o.From, configFile))
		if err != nil {
			return nil, err
		}
		if b != nil {
			var src map[string]any
			if err := json.Unmarshal(b, &src); err != nil {
				return nil, fmt.Errorf("hf: %s: %v", filepath.Join(o.From, configFile), err)
			}
			if text, ok := src["text_config"].(map[string]any); ok {
				for _, k := range tokenIDKeys {
					if v, ok := text[k]; ok {
						src[k] = v
					}
				}
			}
			for _, k := range tokenIDKeys {
				if v, ok := src[k]; ok && v != nil {
					cfg[k], ids[k] = v, v
				}
			}
		}
		gen, err := read(filepath.Join(o.From, "generation_config.json"))
		if err != nil {
			return nil, err
		}
		if gen != nil {
			files = append(files, namedFile{"generation_config.json", gen})
		}
	}
	if !hasFile(files, "generation_config.json") && len(ids) > 0 {
		b, err := json.MarshalIndent(ids, "", "  ")
		if err != nil {
			return nil, err
		}
		files = append(files, namedFile{"generation_config.json", append(b, '\n')})
	}
	return files, nil
}

func hasFile(files []namedFile, name string) bool {
	for _, f := range files {
		if f.name == name {
			return true
		}
	}
	return false
}

// withTemplate puts a chat template where transformers looks for it when
// the tokenizer's files hold none: tokenizer_config.json's chat_template
// (the file made if absent).
func withTemplate(files []namedFile, template string) ([]namedFile, error) {
	if hasFile(files, "chat_template.jinja") {
		return files, nil
	}
	cfg := map[string]any{}
	at := -1
	for i, f := range files {
		if f.name == "tokenizer_config.json" {
			if err := json.Unmarshal(f.data, &cfg); err != nil {
				return nil, fmt.Errorf("hf: tokenizer_config.json: %v", err)
			}
			at = i
		}
	}
	if t, ok := cfg["chat_template"]; ok && t != nil {
		return files, nil
	}
	cfg["chat_template"] = template
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	f := namedFile{"tokenizer_config.json", append(b, '\n')}
	if at < 0 {
		return append(files, f), nil
	}
	files[at] = f
	return files, nil
}
