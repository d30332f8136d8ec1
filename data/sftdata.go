package data

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
)

// The SFT cache file: a header, every example's tokens (uint32 each, the
// id in the low 31 bits and 1<<31 where the token is trained), then one
// index entry per example and a last one: the example's first token (its
// offset among the tokens) and the index of its first trained token after
// the first, or noTrained.
const (
	sftMagic       = "MFSFT\x00\x01\x00"
	sftHeaderBytes = 64
	sftEntryBytes  = 16
	trainedBit     = 1 << 31
	noTrained      = math.MaxUint32
)

// sftCacheVersion changes whenever the cache TokenizeRecord's rules would
// write for the same records changes (2: chat answers found by marking
// what the template does to each message, not by rendering prefixes; 3:
// answers mapped to the tokens that end before their boundaries, in one
// pass, not to the encoding of the text before them, which could stop
// short of a token that straddles a boundary).
const sftCacheVersion = "memfit sft cache 3\n"

// SFTStats describes a fine-tuning dataset.
type SFTStats struct {
	Format   RecordFormat
	Records  int   // records read
	Examples int   // examples trained on (Len without packing)
	Tokens   int64 // tokens of all records' examples, before cutting
	// Short counts records of fewer than two tokens, which predict
	// nothing and are left out.
	Short int
	// Cut counts examples longer than the context, cut to it.
	Cut int
	// Untrained counts examples with no trained token within the context
	// (an answer cut off, a conversation without an assistant turn);
	// they are left out, so that no step trains on nothing.
	Untrained int
	// Windows is the number of packed windows (0 without packing).
	Windows int
}

// String says what the statistics mean, for a run's log.
func (s SFTStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s examples (%d tokens)", s.Examples, s.Format, s.Tokens)
	if s.Windows > 0 {
		fmt.Fprintf(&b, " packed into %d windows", s.Windows)
	}
	if s.Cut > 0 {
		fmt.Fprintf(&b, "; %d longer than the context are cut to it", s.Cut)
	}
	if s.Untrained > 0 {
		fmt.Fprintf(&b, "; %d with no trained token within the context are left out", s.Untrained)
	}
	if s.Short > 0 {
		fmt.Fprintf(&b, "; %d records of fewer than two tokens are left out", s.Short)
	}
	return b.String()
}

// SFTDataset is a fine-tuning dataset: the records of JSON Lines and
// parquet files (OpenRecords) made into Sequences of tokens and labels.
//
// The records are tokenized once, on open, into a cache file named by the
// SHA-256 of their content, the tokenizer's Fingerprint, the chat
// template and the options that change the tokens (CacheDir, else
// $MEMFIT_CACHE, else the user cache directory; written atomically with a
// size/CRC-32C sidecar, as TokenizeCorpus does for text). A later run
// opens it without tokenizing. Get reads one example (or one packed
// window) from it with ReadAt: random access for the loader's shuffling,
// and nothing held in memory but the packed windows' first examples (4
// bytes a window) and the few examples left out.
type SFTDataset struct {
	f       *os.File
	path    string
	opt     SFTOptions
	vocab   int
	entries int // examples in the cache
	n       int // usable examples
	// gaps holds, for each example left out (in order), the usable
	// index it would have had: usable example i is cache example i+k,
	// k the number of gaps <= i.
	gaps  []int32
	bins  []int32 // packed: each window's first usable example, then n
	stats SFTStats
}

// OpenSFT opens the records at path (a file, directory or glob of JSON
// Lines and parquet files) as a fine-tuning dataset, tokenizing them with
// enc the first time (see SFTDataset). Chat records need opt.Template.
func OpenSFT(path string, enc Encoder, opt SFTOptions, opts ...Option) (*SFTDataset, error) {
	if opt.Context < 1 {
		return nil, fileErr("sft", path, "context %d: want at least 1 token", opt.Context)
	}
	if opt.LossOn < LossDefault || opt.LossOn > LossAll {
		return nil, fileErr("sft", path, "loss on %v: want default, answers or all", opt.LossOn)
	}
	recs, err := OpenRecordsLimit(path, opt.MaxRecordBytes)
	if err != nil {
		return nil, err
	}
	if recs.Format() == FormatChat && opt.Template == nil {
		return nil, fileErr("sft", path, "chat records need the model's chat template (tokenizer_config.json's chat_template)")
	}
	vocab := enc.VocabSize()
	if vocab < 1 || vocab > trainedBit {
		return nil, fileErr("sft", path, "tokenizer vocabulary of %d tokens", vocab)
	}
	for _, id := range slices.Concat(opt.BOS, opt.EOS) {
		if id < 0 || id >= vocab {
			return nil, fileErr("sft", path, "BOS/EOS token %d is outside the vocabulary of %d", id, vocab)
		}
	}
	key, err := sftKey(recs, enc, opt)
	if err != nil {
		return nil, err
	}
	dir, err := applyOptions(opts).dir()
	if err != nil {
		return nil, fileErr("sft", path, "%v", err)
	}
	target := filepath.Join(dir, "sft-"+key+".bin")
	if !cacheSound(target) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fileErr("sft", path, "cache: %v", err)
		}
		if err := writeSFTCache(target, recs, enc, opt, vocab); err != nil {
			return nil, err
		}
	}
	return openSFTCache(target, opt, vocab)
}

// sftKey hashes everything the cache's content depends on.
func sftKey(recs *Records, enc Encoder, opt SFTOptions) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s%s\nformat %d loss %d bos %v eos %v\n", sftCacheVersion, enc.Fingerprint(),
		recs.Format(), opt.LossOn.resolve(recs.Format()), opt.BOS, opt.EOS)
	if t := opt.Template; t != nil && recs.Format() == FormatChat {
		keys := make([]string, 0, len(t.Special))
		for k := range t.Special {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(h, "template %d %s\nbos %q eos %q\n", len(t.Source), t.Source, t.BOS, t.EOS)
		if strings.Contains(t.Source, "strftime_now") {
			// The template renders today's date into the records (Llama
			// 3.1's "Today Date"): yesterday's tokens are not today's.
			// Finer formats (hours) still reuse the day's cache.
			fmt.Fprintf(h, "date %s\n", clock().Format("2006-01-02"))
		}
		for _, k := range keys {
			fmt.Fprintf(h, "%s %q\n", k, t.Special[k])
		}
	}
	for _, p := range recs.files {
		f, _, err := regularfile.Open(p)
		if err != nil {
			return "", openErr("sft", p, err)
		}
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", &Error{Format: "sft", Path: p, Record: -1, Err: err}
		}
		fmt.Fprintf(h, "\n%d\n", n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSFTCache tokenizes every record into target, then writes its
// sidecar. The index entries go to a temporary file first (the token
// count is not known before the end), so memory does not grow with the
// records.
func writeSFTCache(target string, recs *Records, enc Encoder, opt SFTOptions, vocab int) error {
	first := ""
	if len(recs.files) > 0 {
		first = recs.files[0]
	}
	crc := crc32.New(castagnoli)
	var size int64
	err := writeAtomic(target, func(w io.Writer) error {
		f := w.(*os.File)
		idx, err := os.CreateTemp(filepath.Dir(target), ".sft-index-*.tmp")
		if err != nil {
			return fmt.Errorf("cache: %w", err)
		}
		defer func() {
			idx.Close()
			os.Remove(idx.Name())
		}()
		bw := bufio.NewWriterSize(f, 1<<20)
		iw := bufio.NewWriterSize(idx, 1<<16)
		if _, err := bw.Write(make([]byte, sftHeaderBytes)); err != nil {
			return err
		}
		var tokens, examples, records, short int64
		buf := make([]byte, 0, 1<<12)
		entry := make([]byte, sftEntryBytes)
		err = recs.Each(func(rec Record, at RecordPos) error {
			records++
			ids, trained, err := tokenize(rec, enc, opt)
			if err != nil {
				return err
			}
			if len(ids) < 2 {
				short++
				return nil
			}
			firstTrained := uint32(noTrained)
			buf = buf[:0]
			for t, id := range ids {
				if id < 0 || id >= vocab {
					return fmt.Errorf("token %d is outside the vocabulary of %d", id, vocab)
				}
				v := uint32(id)
				if trained[t] {
					v |= trainedBit
					if t > 0 && firstTrained == noTrained {
						firstTrained = uint32(min(t, noTrained-1))
					}
				}
				buf = binary.LittleEndian.AppendUint32(buf, v)
			}
			binary.LittleEndian.PutUint64(entry, uint64(tokens))
			binary.LittleEndian.PutUint32(entry[8:], firstTrained)
			if _, err := iw.Write(entry); err != nil {
				return err
			}
			if _, err := bw.Write(buf); err != nil {
				return err
			}
			tokens += int64(len(ids))
			examples++
			return nil
		})
		if err != nil {
			return err
		}
		if examples > math.MaxInt32 {
			return fileErr("sft", first, "%d examples: at most %d", examples, math.MaxInt32)
		}
		binary.LittleEndian.PutUint64(entry, uint64(tokens))
		binary.LittleEndian.PutUint32(entry[8:], noTrained)
		if _, err := iw.Write(entry); err != nil {
			return err
		}
		if err := iw.Flush(); err != nil {
			return err
		}
		if _, err := idx.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(bw, idx); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		hdr := make([]byte, sftHeaderBytes)
		copy(hdr, sftMagic)
		binary.LittleEndian.PutUint64(hdr[8:], uint64(examples))
		binary.LittleEndian.PutUint64(hdr[16:], uint64(tokens))
		binary.LittleEndian.PutUint64(hdr[24:], uint64(records))
		binary.LittleEndian.PutUint64(hdr[32:], uint64(short))
		binary.LittleEndian.PutUint32(hdr[40:], uint32(recs.Format()))
		binary.LittleEndian.PutUint32(hdr[44:], uint32(vocab))
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return err
		}
		size = sftHeaderBytes + 4*tokens + sftEntryBytes*(examples+1)
		_, err = io.Copy(crc, io.NewSectionReader(f, 0, size))
		return err
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return fileErr("sft", first, "%v", err)
	}
	sum := fmt.Sprintf(sumFormat, size, crc.Sum32())
	if err := writeAtomic(target+".sum", func(w io.Writer) error {
		_, err := io.WriteString(w, sum)
		return err
	}); err != nil {
		return fileErr("sft", first, "%v", err)
	}
	return nil
}

// openSFTCache opens a cache file and, in one pass over its index, finds
// the examples that are cut, those left out and the packed windows.
func openSFTCache(path string, opt SFTOptions, vocab int) (*SFTDataset, error) {
	f, _, err := regularfile.Open(path)
	if err != nil {
		return nil, openErr("sft", path, err)
	}
	d := &SFTDataset{f: f, path: path, opt: opt, vocab: vocab}
	fail := func(format string, args ...any) (*SFTDataset, error) {
		f.Close()
		return nil, fileErr("sft", path, format, args...)
	}
	hdr := make([]byte, sftHeaderBytes)
	if _, err := f.ReadAt(hdr, 0); err != nil || string(hdr[:8]) != sftMagic {
		return fail("not a memfit fine-tuning cache")
	}
	examples := binary.LittleEndian.Uint64(hdr[8:])
	tokens := binary.LittleEndian.Uint64(hdr[16:])
	st, err := f.Stat()
	if err != nil || examples > math.MaxInt32 || tokens > 1<<40 ||
		st.Size() != sftHeaderBytes+4*int64(tokens)+sftEntryBytes*(int64(examples)+1) {
		return fail("header does not match the file's size")
	}
	if v := int(binary.LittleEndian.Uint32(hdr[44:])); v != vocab {
		return fail("written for a vocabulary of %d tokens, not %d", v, vocab)
	}
	d.entries = int(examples)
	d.stats = SFTStats{
		Format:  RecordFormat(binary.LittleEndian.Uint32(hdr[40:])),
		Records: int(binary.LittleEndian.Uint64(hdr[24:])),
		Tokens:  int64(tokens),
		Short:   int(binary.LittleEndian.Uint64(hdr[32:])),
	}
	var pk *packer
	if opt.Pack {
		pk = newPacker(opt.Context)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, d.indexAt(0), sftEntryBytes*(int64(examples)+1)), 1<<16)
	entry := make([]byte, sftEntryBytes)
	if _, err := io.ReadFull(r, entry); err != nil {
		return fail("index: %v", err)
	}
	for e := range d.entries {
		off := binary.LittleEndian.Uint64(entry)
		ft := binary.LittleEndian.Uint32(entry[8:])
		if _, err := io.ReadFull(r, entry); err != nil {
			return fail("index: %v", err)
		}
		next := binary.LittleEndian.Uint64(entry)
		if next < off+2 || next > tokens {
			return fail("index entry %d spans tokens %d to %d of %d", e, off, next, tokens)
		}
		pos := int64(next - off - 1) // positions the example takes
		if pos > int64(opt.Context) {
			pos = int64(opt.Context)
			d.stats.Cut++
		}
		if ft == noTrained || int64(ft) > pos {
			d.stats.Untrained++
			d.gaps = append(d.gaps, int32(d.n))
			continue
		}
		d.n++
		if pk != nil {
			pk.add(int(pos))
		}
	}
	if d.n == 0 {
		return fail("no example has a trained token within the context of %d (%s)", opt.Context, d.stats)
	}
	d.stats.Examples = d.n
	if pk != nil {
		d.bins = pk.windows()
		d.stats.Windows = len(d.bins) - 1
	}
	return d, nil
}

// indexAt returns the file offset of index entry e.
func (d *SFTDataset) indexAt(e int) int64 {
	return sftHeaderBytes + 4*d.stats.Tokens + sftEntryBytes*int64(e)
}

// Len returns the number of examples, or of packed windows.
func (d *SFTDataset) Len() int {
	if d.bins != nil {
		return len(d.bins) - 1
	}
	return d.n
}

// Examples returns the number of examples (whether packed or not).
func (d *SFTDataset) Examples() int { return d.n }

// Vocab returns the tokenizer's vocabulary size.
func (d *SFTDataset) Vocab() int { return d.vocab }

// Stats describes the dataset.
func (d *SFTDataset) Stats() SFTStats { return d.stats }

// Context returns the most positions of an example or window.
func (d *SFTDataset) Context() int { return d.opt.Context }

// Close closes the cache file.
func (d *SFTDataset) Close() error {
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// cacheIndex returns the cache example of usable example i.
func (d *SFTDataset) cacheIndex(i int) int {
	k := sort.Search(len(d.gaps), func(j int) bool { return int(d.gaps[j]) > i })
	return i + k
}

// read returns example i's tokens (with their trained bits), cut to
// Context+1 tokens.
func (d *SFTDataset) read(i int, buf []byte) ([]byte, error) {
	e := d.cacheIndex(i)
	var ent [2 * sftEntryBytes]byte
	if _, err := d.f.ReadAt(ent[:], d.indexAt(e)); err != nil {
		return nil, recordErr("sft", d.path, e, fmt.Errorf("index: %w", err))
	}
	off := binary.LittleEndian.Uint64(ent[:])
	next := binary.LittleEndian.Uint64(ent[sftEntryBytes:])
	n := min(next-off, uint64(d.opt.Context)+1)
	if cap(buf) < int(4*n) {
		buf = make([]byte, 4*n)
	}
	buf = buf[:4*n]
	if _, err := d.f.ReadAt(buf, sftHeaderBytes+4*int64(off)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, recordErr("sft", d.path, e, err)
	}
	return buf, nil
}

// tokenAt decodes token t of raw cache bytes: its id and its label.
func tokenAt(raw []byte, t int) (id, label int32) {
	v := binary.LittleEndian.Uint32(raw[4*t:])
	id = int32(v &^ trainedBit)
	if v&trainedBit != 0 {
		return id, id
	}
	return id, IgnoreIndex
}

// Get returns example i, or packed window i, as a Sequence: the tokens
// but the last of each example as inputs, the next token's label as
// targets, and (packed) each token's position within its example.
func (d *SFTDataset) Get(i int) (Example, error) {
	if i < 0 || i >= d.Len() {
		return nil, fmt.Errorf("sft: example %d out of range [0, %d)", i, d.Len())
	}
	if d.f == nil {
		return nil, errors.New("sft: dataset is closed")
	}
	if d.bins == nil {
		raw, err := d.read(i, nil)
		if err != nil {
			return nil, err
		}
		t := len(raw)/4 - 1
		out := make([]int32, 2*t)
		s := Sequence{Input: out[:t:t], Target: out[t:]}
		for k := range t {
			s.Input[k], _ = tokenAt(raw, k)
			_, s.Target[k] = tokenAt(raw, k+1)
		}
		return s, nil
	}
	// A window's examples: their index entries in one read (the cache
	// examples from the first to the last, gaps included), then their
	// tokens into one buffer.
	lo, hi := int(d.bins[i]), int(d.bins[i+1])
	first, last := d.cacheIndex(lo), d.cacheIndex(hi-1)
	ent := make([]byte, sftEntryBytes*(last-first+2))
	if _, err := d.f.ReadAt(ent, d.indexAt(first)); err != nil {
		return nil, recordErr("sft", d.path, first, fmt.Errorf("index: %w", err))
	}
	span := func(u int) (off, n int64) {
		k := (d.cacheIndex(u) - first) * sftEntryBytes
		off = int64(binary.LittleEndian.Uint64(ent[k:]))
		next := int64(binary.LittleEndian.Uint64(ent[k+sftEntryBytes:]))
		return off, min(next-off, int64(d.opt.Context)+1)
	}
	total, size := 0, int64(0)
	for u := lo; u < hi; u++ {
		_, n := span(u)
		total += int(n) - 1
		size += n
	}
	raw := make([]byte, 4*size)
	out := make([]int32, 3*total)
	s := Sequence{Input: out[:total:total], Target: out[total : 2*total : 2*total], Position: out[2*total:]}
	at, b := 0, raw
	for u := lo; u < hi; u++ {
		off, n := span(u)
		r := b[:4*n]
		b = b[4*n:]
		if _, err := d.f.ReadAt(r, sftHeaderBytes+4*off); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, recordErr("sft", d.path, d.cacheIndex(u), err)
		}
		t := int(n) - 1
		for k := range t {
			s.Input[at+k], _ = tokenAt(r, k)
			_, s.Target[at+k] = tokenAt(r, k+1)
			s.Position[at+k] = int32(k)
		}
		at += t
	}
	return s, nil
}

// Example returns example i (in the dataset's order, whether packed or
// not) as it is trained: its tokens cut to the context and their labels.
func (d *SFTDataset) Example(i int) (TokenizedExample, error) {
	if i < 0 || i >= d.n {
		return TokenizedExample{}, fmt.Errorf("sft: example %d out of range [0, %d)", i, d.n)
	}
	if d.f == nil {
		return TokenizedExample{}, errors.New("sft: dataset is closed")
	}
	raw, err := d.read(i, nil)
	if err != nil {
		return TokenizedExample{}, err
	}
	n := len(raw) / 4
	ex := TokenizedExample{Tokens: make([]int32, n), Labels: make([]int32, n)}
	for t := range n {
		ex.Tokens[t], ex.Labels[t] = tokenAt(raw, t)
	}
	ex.Labels[0] = IgnoreIndex // nothing predicts the first token
	return ex, nil
}

// WriteExamples writes the first n examples of d as they will be trained,
// one JSON object per line: {"tokens": [...], "labels": [...]}, the labels
// aligned with the tokens and IgnoreIndex (-100) where nothing is trained.
func WriteExamples(w io.Writer, d *SFTDataset, n int) error {
	bw := bufio.NewWriter(w)
	for i := range min(n, d.Examples()) {
		ex, err := d.Example(i)
		if err != nil {
			return err
		}
		b, err := json.Marshal(ex)
		if err != nil {
			return err
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
