package train

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/tokenizer"
)

// loaderBatches delivers a loader's batches epoch after epoch.
type loaderBatches struct {
	l    *data.Loader
	next func() (*data.Batch, error, bool)
	stop func()
}

func (b *loaderBatches) Next(ctx context.Context) (*data.Batch, error) {
	for range 2 {
		if b.next == nil {
			b.next, b.stop = iter.Pull2(b.l.All(ctx))
		}
		batch, err, ok := b.next()
		if ok {
			return batch, err
		}
		b.close() // the epoch is over; the loader's position is the next one
	}
	return nil, fmt.Errorf("data: the loader delivered no batch")
}

func (b *loaderBatches) close() {
	if b.stop != nil {
		b.stop()
	}
	b.next, b.stop = nil, nil
}

func (b *loaderBatches) Position() data.Position { return b.l.Position() }
func (b *loaderBatches) PerEpoch() int           { return b.l.Len() }

func (b *loaderBatches) Seek(p data.Position) error {
	b.close()
	return b.l.Seek(p)
}

// dataset is what the trainer learns from: training and validation sets
// and what the model must fit (input shape, classes or vocabulary).
type dataset struct {
	train, val data.Dataset
	tokens     bool
	inShape    []int // one example's input shape
	classes    int   // classes, or vocabulary size for tokens
	codec      Codec // tokens: text to tokens and back
	// ignore is the target that trains nothing: -1 (token windows
	// have none), data.IgnoreIndex for fine-tuning records.
	ignore int
	// Fine-tuning records (recordsdata.go): the dataset, and whether
	// its batches carry per-example positions (-pack).
	sft    *data.SFTDataset
	packed bool
	// synthetic is the embedded synthetic task's vocabulary when it is
	// larger than the model's (-init's), which training refuses.
	synthetic int
}

// openData resolves -data: "" is the embedded synthetic task for the
// model; a directory of IDX files (Fashion-MNIST/MNIST names), a
// directory of class folders, a token-shard glob or .bin file, or any
// other file as a byte corpus, or, with -tokenizer, as text that the
// tokenizer encodes.
func openData(cfg Config) (*dataset, error) {
	ds := &dataset{ignore: -1}
	kind, _ := cfg.kind()
	var all data.Dataset
	path := cfg.Data.Path
	var tok *tokenizer.BPE
	if err := checkRecordFlags(cfg); err != nil {
		return nil, err
	}
	if cfg.Data.Tokenizer != "" {
		if path == "" && cfg.Generate.Tokens == 0 {
			return nil, fmt.Errorf("-tokenizer %s: needs -data naming a text file or token shards", cfg.Data.Tokenizer)
		}
		var err error
		if tok, err = openTokenizer(cfg.Data.Tokenizer); err != nil {
			return nil, err
		}
	}
	switch {
	case path == "" && kind.Tokens:
		t, err := data.NewSyntheticText(data.SyntheticTextConfig{Context: cfg.Model.Context, Seed: cfg.Seed})
		if err != nil {
			return nil, err
		}
		all, ds.tokens, ds.classes, ds.codec = t, true, t.Vocab(), idCodec{t.Vocab()}
		if tok != nil {
			// -generate needs no data: the synthetic task only gives the
			// shapes, and prompts go through the tokenizer.
			ds.classes, ds.codec = tok.VocabSize(), tokenizerCodec{t: tok, path: cfg.Data.Tokenizer}
		}
	case path == "":
		// Vectors of 32, or a model's images flattened.
		dim := 32
		if kind.Image != nil {
			dim = elems(kind.Image)
		}
		s, err := data.NewSpirals(data.SpiralsConfig{N: 60000, Dim: dim, Seed: cfg.Seed})
		if err != nil {
			return nil, err
		}
		all, ds.classes = s, s.NumClasses()
	case isRecords(path):
		if err := openRecords(cfg, ds, tok); err != nil {
			return nil, err
		}
		all = ds.sft
	default:
		st, err := os.Stat(strings.TrimRight(path, "*"))
		isGlob := strings.ContainsAny(path, "*?[")
		switch {
		case isGlob || strings.HasSuffix(path, ".bin"):
			opt := data.WindowOptions{Context: cfg.Model.Context, Random: true, Seed: cfg.Seed, Vocab: cfg.Model.Vocab}
			if tok != nil {
				opt.Vocab = tok.VocabSize()
			}
			t, err := data.OpenShards(path, opt)
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			// Without a tokenizer or -vocab, the shards' format says:
			// GPT-2's vocabulary for uint16 tokens, padded to a multiple
			// of 64 as llm.c does, Llama 3's for uint32.
			classes := t.Vocab()
			if classes == 50257 && opt.Vocab == 0 {
				classes = 50304
			}
			var codec Codec = idCodec{classes}
			if tok != nil {
				codec = tokenizerCodec{t: tok, path: cfg.Data.Tokenizer}
			}
			all, ds.tokens, ds.classes, ds.codec = t, true, classes, codec
		case err != nil:
			return nil, fmt.Errorf("-data %s: %v", path, err)
		case st.IsDir() && tok != nil:
			return nil, fmt.Errorf("-tokenizer %s: -data %s is a directory; a tokenizer needs a text file or token shards", cfg.Data.Tokenizer, path)
		case tok != nil:
			t, err := data.TokenizeCorpus([]string{path}, tok, data.WindowOptions{Context: cfg.Model.Context, Random: true, Seed: cfg.Seed})
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			all, ds.tokens, ds.classes, ds.codec = t, true, tok.VocabSize(), tokenizerCodec{t: tok, path: cfg.Data.Tokenizer}
		case st.IsDir() && hasIDX(path):
			tr, err := data.FashionMNIST(path, true)
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			te, err := data.FashionMNIST(path, false)
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			// Fashion-MNIST's ten classes; a label outside them would
			// fail only when its batch came up, naming nothing.
			for _, d := range []*data.IDXDataset{tr, te} {
				if err := d.CheckLabels(10); err != nil {
					return nil, fmt.Errorf("-data %s: %v", path, err)
				}
			}
			ds.train, ds.val, ds.classes = tr, te, 10
		case st.IsDir():
			f, err := data.OpenImageFolder(path, data.ImageFolderOptions{})
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			all, ds.classes = f, f.NumClasses()
		default:
			t, err := data.OpenCorpus([]string{path}, data.WindowOptions{Context: cfg.Model.Context, Random: true, Seed: cfg.Seed})
			if err != nil {
				return nil, fmt.Errorf("-data %s: %v", path, err)
			}
			all, ds.tokens, ds.classes, ds.codec = t, true, 256, byteCodec{}
		}
	}
	if ds.train == nil {
		if cfg.Data.ValSplit > 0 {
			tr, va, err := data.Split(all, cfg.Data.ValSplit, cfg.Seed)
			if err != nil {
				return nil, fmt.Errorf("-val-split: %v", err)
			}
			ds.train, ds.val = tr, va
		} else {
			ds.train = all
		}
	}
	if ds.train.Len() == 0 {
		return nil, fmt.Errorf("-data %s: no examples", path)
	}
	ex, err := ds.train.Get(0)
	if err != nil {
		return nil, fmt.Errorf("-data %s: %v", path, err)
	}
	switch e := ex.(type) {
	case data.Sequence:
		// Rows of at most the context; a batch is as long as its
		// longest row.
		ds.inShape = []int{cfg.Model.Context}
	case data.Image:
		ds.inShape = append([]int(nil), e.Shape...)
	case *data.Image:
		ds.inShape = append([]int(nil), e.Shape...)
	case data.Window:
		ds.inShape = []int{len(e.Input)}
	case *data.Window:
		ds.inShape = []int{len(e.Input)}
	default:
		return nil, fmt.Errorf("-data %s: examples of type %T are not supported", path, ex)
	}
	if kind.Image != nil && len(ds.inShape) == 1 && ds.inShape[0] == elems(kind.Image) {
		// Flat vectors (the synthetic task) of an image's size are that
		// image to a model of images.
		ds.inShape = append([]int(nil), kind.Image...)
	}
	if _, bytes := ds.codec.(byteCodec); bytes && cfg.Model.Vocab > 0 && cfg.Model.Vocab < 256 {
		return nil, fmt.Errorf("-data %s is a text file of bytes (256 token ids), more than the model's vocabulary of %d (-init)", displayPath(path), cfg.Model.Vocab)
	}
	if ds.tokens && cfg.Model.Vocab > 0 && ds.classes > cfg.Model.Vocab {
		// Ids the embedding has no row for would fail the first step
		// (the synthetic task's: Trainer.CheckData, before training).
		switch {
		case path == "":
			ds.synthetic = ds.classes
		case tok != nil:
			return nil, fmt.Errorf("-tokenizer %s: %d token ids, more than the model's vocabulary of %d (-init %s)", cfg.Data.Tokenizer, ds.classes, cfg.Model.Vocab, cfg.Model.Init)
		}
	}
	if ds.tokens && cfg.Model.Vocab > 0 {
		// The model's vocabulary (-init): token ids beyond it fail when
		// their batch is read, naming the file.
		ds.classes = cfg.Model.Vocab
		if c, ok := ds.codec.(idCodec); ok {
			c.vocab = cfg.Model.Vocab
			ds.codec = c
		}
	}
	if ds.tokens != kind.Tokens {
		kind := "images or vectors"
		if ds.tokens {
			kind = "tokens"
		}
		return nil, fmt.Errorf("-data %s holds %s, which -model %s does not take", displayPath(path), kind, cfg.Model.Name)
	}
	return ds, nil
}

// openTokenizer opens -tokenizer, saying the path once.
func openTokenizer(path string) (*tokenizer.BPE, error) {
	tok, err := tokenizer.Open(path)
	if err == nil {
		return tok, nil
	}
	var te *tokenizer.Error
	if errors.As(err, &te) && te.Path == path {
		return nil, fmt.Errorf("-tokenizer %s: %v", path, te.Err)
	}
	return nil, fmt.Errorf("-tokenizer %s: %v", path, err)
}

// tokenizerCodec is a Codec through a tokenizer.
type tokenizerCodec struct {
	t    *tokenizer.BPE
	chat *data.ChatTemplate // the model's chat template, nil without one
	path string             // -tokenizer, which names the template's file
}

func (c tokenizerCodec) Encode(s string) ([]int, error) { return c.t.Encode(s), nil }

// EncodeChat renders s as a user's message with the chat template and
// its generation prompt, and encodes that (special tokens as theirs).
func (c tokenizerCodec) EncodeChat(s string) ([]int, error) {
	chat := c.chat
	if chat == nil {
		var err error
		if chat, err = chatTemplate(c.t, c.path); err != nil {
			return nil, err
		}
		if chat == nil {
			return nil, fmt.Errorf("-chat: the tokenizer has no chat template (tokenizer_config.json's chat_template)")
		}
	}
	text, err := chat.Render([]data.Message{{Role: "user", Content: s}}, true)
	if err != nil {
		return nil, err
	}
	return c.t.Encode(text), nil
}

func (c tokenizerCodec) Decode(ids []int) string {
	s, err := c.t.Decode(ids)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return s
}

func displayPath(p string) string {
	if p == "" {
		return "(synthetic)"
	}
	return p
}

func hasIDX(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*-idx*-ubyte*"))
	return len(m) > 0
}
