package train

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/tokenizer"
)

// Fine-tuning records (-data FILE.jsonl or .parquet, a directory or glob
// of them): prompt/completion, chat messages, Alpaca or text records,
// tokenized once through the run's tokenizer (and, for chats, the
// model's own chat template) into windows whose labels train the answers
// only (-loss-on), packed without padding (-pack) or one example a row,
// a batch padded to its longest (package data, OpenSFT).

// recordExts are the files records are read from.
var recordExts = []string{".jsonl", ".json", ".parquet"}

// isRecords reports whether -data names fine-tuning records: such a
// file or glob, or a directory holding them (at its top or one level
// down).
func isRecords(path string) bool {
	ext := strings.ToLower(filepath.Ext(strings.TrimRight(path, "*")))
	for _, e := range recordExts {
		if ext == e {
			return true
		}
	}
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		return false
	}
	for _, e := range recordExts {
		for _, pat := range []string{"*" + e, "*/*" + e} {
			if m, _ := filepath.Glob(filepath.Join(path, pat)); len(m) > 0 {
				return true
			}
		}
	}
	return false
}

// checkRecordFlags refuses the flags of records for data that is not
// records: they would do nothing.
func checkRecordFlags(cfg Config) error {
	if cfg.Data.Path != "" && isRecords(cfg.Data.Path) {
		return nil
	}
	d := cfg.Data
	switch {
	case d.Pack:
		return fmt.Errorf("-pack: -data %s is not fine-tuning records (.jsonl, .json, .parquet): token windows are full already", displayPath(d.Path))
	case d.LossOn != "":
		return fmt.Errorf("-loss-on %s: -data %s is not fine-tuning records (.jsonl, .json, .parquet), whose prompts it could leave out", quoteShort(d.LossOn), displayPath(d.Path))
	case d.ShowExamples > 0:
		return fmt.Errorf("-show-examples %d: -data %s is not fine-tuning records (.jsonl, .json, .parquet)", d.ShowExamples, displayPath(d.Path))
	case d.MaxRecordBytes != 0 && d.MaxRecordBytes != data.DefaultMaxRecordBytes:
		return fmt.Errorf("-max-record-bytes %d: -data %s is not fine-tuning records (.jsonl, .json, .parquet)", d.MaxRecordBytes, displayPath(d.Path))
	}
	return nil
}

// openRecords opens -data's records into ds with tok.
func openRecords(cfg Config, ds *dataset, tok *tokenizer.BPE) error {
	path := cfg.Data.Path
	if tok == nil {
		return fmt.Errorf("-data %s: fine-tuning records need a tokenizer (-tokenizer, or -init's directory)", path)
	}
	lossOn, err := data.ParseLossOn(cfg.Data.LossOn)
	if err != nil {
		return fmt.Errorf("-loss-on %s: %v", quoteShort(cfg.Data.LossOn), err)
	}
	chat, err := chatTemplate(tok, cfg.Data.Tokenizer)
	if err != nil {
		return fmt.Errorf("-tokenizer %s: %v", cfg.Data.Tokenizer, err)
	}
	if chat != nil {
		// A template writes bos_token and eos_token as text: each must
		// come back as its one token, or the model would be trained to
		// end its answers with pieces of the name instead.
		for _, s := range []struct {
			key, text string
			id        int
		}{{"bos_token", tok.BOSToken(), tok.BOS()}, {"eos_token", tok.EOSToken(), tok.EOS()}} {
			if s.text == "" || s.id < 0 {
				continue
			}
			if ids := tok.Encode(s.text); len(ids) != 1 || ids[0] != s.id {
				return fmt.Errorf("-tokenizer %s: %s %s encodes to the tokens %v, not its one token %d: the chat template writes it as text (is it missing from added_tokens?)",
					cfg.Data.Tokenizer, s.key, quoteShort(s.text), ids[:min(len(ids), 8)], s.id)
			}
		}
	}
	opt := data.SFTOptions{Context: cfg.Model.Context, Pack: cfg.Data.Pack, LossOn: lossOn, Template: chat, MaxRecordBytes: cfg.Data.MaxRecordBytes}
	// Non-chat records get the tokenizer's BOS before (where it has one
	// of its own, as Llama's: GPT-2's is its EOS, which transformers
	// does not prepend) and EOS after, trained with the answer.
	if b := tok.BOS(); b >= 0 && b != tok.EOS() {
		opt.BOS = []int{b}
	}
	if e := tok.EOS(); e >= 0 {
		opt.EOS = []int{e}
	}
	sft, err := data.OpenSFT(path, tok, opt)
	var tooLarge *data.RecordTooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("-data %s: %v (-max-record-bytes)", path, err)
	}
	if err != nil {
		return fmt.Errorf("-data %s: %v", path, err)
	}
	if cfg.Model.Vocab > 0 && sft.Vocab() > cfg.Model.Vocab {
		sft.Close()
		return fmt.Errorf("-data %s: its tokenizer's vocabulary of %d is larger than the model's %d", path, sft.Vocab(), cfg.Model.Vocab)
	}
	ds.sft, ds.tokens, ds.classes, ds.packed, ds.ignore = sft, true, sft.Vocab(), cfg.Data.Pack, data.IgnoreIndex
	ds.codec = tokenizerCodec{t: tok, chat: chat, path: cfg.Data.Tokenizer}
	return nil
}

// chatTemplate is the tokenizer's chat template (tokenizer_config.json),
// nil when it has none.
func chatTemplate(tok *tokenizer.BPE, path string) (*data.ChatTemplate, error) {
	if tok.ChatTemplate() == "" {
		return nil, nil
	}
	// Errors about the template name where it came from: the
	// tokenizer's chat_template.jinja, else its tokenizer_config.json.
	dir := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir = filepath.Dir(path)
	}
	name := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(filepath.Join(dir, "chat_template.jinja")); err == nil {
		name = filepath.Join(dir, "chat_template.jinja")
	}
	t, err := data.NewChatTemplate(tok.ChatTemplate(), tok.BOSToken(), tok.EOSToken())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t.Name = name
	return t, nil
}

// ShowExamples writes the first n training examples of cfg's records as
// they will be trained, one JSON object a line, {"tokens": [...],
// "labels": [...]} (labels aligned with the tokens, -100 where nothing is
// trained): -show-examples.
func ShowExamples(cfg Config, w io.Writer, n int) error {
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		return err
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return err
	}
	ds, err := openData(cfg)
	if err != nil {
		return err
	}
	if ds.sft == nil {
		return fmt.Errorf("-show-examples %d: -data %s is not fine-tuning records", n, displayPath(cfg.Data.Path))
	}
	defer ds.sft.Close()
	return data.WriteExamples(w, ds.sft, n)
}

// quoteShort quotes s for a message, at most 200 bytes of it: an error
// never echoes a whole hostile input.
func quoteShort(s string) string {
	const most = 200
	if len(s) <= most {
		return strconv.Quote(s)
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}
