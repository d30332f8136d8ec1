package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/memfit/memfit/internal/regularfile"
)

// WindowOptions says how a token dataset cuts its token stream into
// windows.
type WindowOptions struct {
	// Context is the number of input tokens per window; a window reads
	// Context+1 tokens (the targets are the inputs shifted by one).
	Context int
	// Random places windows at offsets drawn from Seed (window i always
	// starts at the same offset); otherwise window i starts at token
	// i·Context, so consecutive windows tile the stream.
	Random bool
	Seed   uint64
	// Windows is the number of windows when Random; 0 means one per
	// Context tokens of the stream.
	Windows int
	// Vocab, when positive, makes a token outside [0, Vocab) an error that
	// names the file and the token's position.
	Vocab int
}

// tokenFile is a run of tokens inside one file (a shard's payload) or
// inside the concatenation of files (a corpus).
type tokenFile struct {
	name  string
	r     io.ReaderAt
	off   int64 // byte offset of token 0
	ntok  int64
	width int // bytes per token: 1, 2 or 4
	cat   *concat
}

// nameAt returns the file that holds token t.
func (s *tokenFile) nameAt(t int64) string {
	if s.cat != nil {
		return s.cat.names[s.cat.locate(t)]
	}
	return s.name
}

// TokenDataset cuts one or more token streams into Windows read on demand
// with ReadAt; a window never spans two shards. It holds its files open
// until Close.
type TokenDataset struct {
	format  string
	files   []tokenFile
	opt     WindowOptions
	n       int
	cum     []int64 // sequential: windows before file i; random: start offsets before file i
	total   int64   // tokens in all files
	closers []io.Closer
}

func newTokenDataset(format, name string, files []tokenFile, closers []io.Closer, opt WindowOptions) (*TokenDataset, error) {
	fail := func(msg string, args ...any) (*TokenDataset, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, fileErr(format, name, msg, args...)
	}
	if opt.Context < 1 {
		return fail("context %d: want at least 1 token", opt.Context)
	}
	if opt.Windows < 0 {
		return fail("%d windows: want 0 or more", opt.Windows)
	}
	d := &TokenDataset{format: format, files: files, opt: opt, closers: closers, cum: make([]int64, len(files)+1)}
	c := int64(opt.Context)
	longest := int64(0)
	for i, f := range files {
		d.total += f.ntok
		longest = max(longest, f.ntok)
		var k int64
		if f.ntok > c {
			if opt.Random {
				k = f.ntok - c
			} else {
				k = (f.ntok - 1) / c
			}
		}
		d.cum[i+1] = d.cum[i] + k
	}
	if d.cum[len(files)] == 0 {
		if len(files) > 1 {
			return fail("no file holds context+1 = %d tokens (the longest holds %d)", c+1, longest)
		}
		return fail("holds %d tokens, fewer than context+1 = %d", d.total, c+1)
	}
	switch {
	case !opt.Random:
		d.n = clampInt(d.cum[len(files)])
	case opt.Windows > 0:
		d.n = opt.Windows
	default:
		d.n = clampInt(max(d.total/c, 1))
	}
	return d, nil
}

func clampInt(v int64) int {
	return int(min(v, math.MaxInt32))
}

// Len returns the number of windows.
func (d *TokenDataset) Len() int { return d.n }

// Tokens returns the number of tokens in all files.
func (d *TokenDataset) Tokens() int64 { return d.total }

// Context returns the number of input tokens per window.
func (d *TokenDataset) Context() int { return d.opt.Context }

// Vocab returns WindowOptions.Vocab when it was set, else the size of the
// vocabulary the format implies: 256 for a byte corpus, 50257 (GPT-2) for
// uint16 shards and 128256 (Llama 3) for uint32 shards.
func (d *TokenDataset) Vocab() int {
	if d.opt.Vocab > 0 {
		return d.opt.Vocab
	}
	v := 0
	for _, f := range d.files {
		switch f.width {
		case 1:
			v = max(v, 256)
		case 2:
			v = max(v, 50257)
		default:
			v = max(v, 128256)
		}
	}
	return v
}

// Close closes the dataset's files.
func (d *TokenDataset) Close() error {
	var errs []error
	for _, c := range d.closers {
		errs = append(errs, c.Close())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// locate returns the file and first token of window i.
func (d *TokenDataset) locate(i int) (int, int64) {
	g := int64(i)
	if d.opt.Random {
		g = int64(below(mix(d.opt.Seed, uint64(i)), uint64(d.cum[len(d.files)])))
	}
	f := sort.Search(len(d.files), func(k int) bool { return d.cum[k+1] > g }) // first file whose range passes g
	g -= d.cum[f]
	if !d.opt.Random {
		g *= int64(d.opt.Context)
	}
	return f, g
}

// Get reads window i.
func (d *TokenDataset) Get(i int) (Example, error) {
	if i < 0 || i >= d.n {
		return nil, fmt.Errorf("%s: window %d out of range [0, %d)", d.format, i, d.n)
	}
	fi, start := d.locate(i)
	f := &d.files[fi]
	c := d.opt.Context
	buf := make([]byte, (c+1)*f.width)
	if _, err := f.r.ReadAt(buf, f.off+start*int64(f.width)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, recordErr(d.format, f.nameAt(start), i, fmt.Errorf("read tokens %d to %d: %w", start, start+int64(c), err))
	}
	in, tg := make([]int32, c), make([]int32, c)
	for j := 0; j <= c; j++ {
		var t uint32
		switch f.width {
		case 1:
			t = uint32(buf[j])
		case 2:
			t = uint32(binary.LittleEndian.Uint16(buf[2*j:]))
		default:
			t = binary.LittleEndian.Uint32(buf[4*j:])
		}
		if t > math.MaxInt32 {
			return nil, recordErr(d.format, f.nameAt(start+int64(j)), i, fmt.Errorf("token %d at position %d does not fit in int32", t, start+int64(j)))
		}
		if d.opt.Vocab > 0 && int64(t) >= int64(d.opt.Vocab) {
			return nil, recordErr(d.format, f.nameAt(start+int64(j)), i, fmt.Errorf("token %d at position %d is outside the vocabulary of %d", t, start+int64(j), d.opt.Vocab))
		}
		if j < c {
			in[j] = int32(t)
		}
		if j > 0 {
			tg[j-1] = int32(t)
		}
	}
	return Window{Input: in, Target: tg}, nil
}

// concat reads a list of files as one stream.
type concat struct {
	files  []*os.File
	names  []string
	starts []int64 // offset of each file in the stream, then the total
}

func (c *concat) locate(off int64) int {
	return sort.Search(len(c.files), func(k int) bool { return c.starts[k+1] > off })
}

func (c *concat) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		k := c.locate(off)
		if k >= len(c.files) {
			return n, io.EOF
		}
		m, err := c.files[k].ReadAt(p[n:min(int64(len(p)), int64(n)+c.starts[k+1]-off)], off-c.starts[k])
		n += m
		off += int64(m)
		if err != nil && !(err == io.EOF && off == c.starts[k+1]) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, fmt.Errorf("%s: %w", c.names[k], err)
		}
	}
	return n, nil
}

// OpenCorpus opens files as one byte stream, each byte a token (vocabulary
// 256), cut into windows as opt says. Nothing is read before Get.
func OpenCorpus(paths []string, opt WindowOptions) (*TokenDataset, error) {
	if len(paths) == 0 {
		return nil, fileErr("corpus", "", "no files")
	}
	c := &concat{starts: []int64{0}}
	closers := make([]io.Closer, 0, len(paths))
	fail := func(err *Error) (*TokenDataset, error) {
		for _, f := range closers {
			f.Close()
		}
		return nil, err
	}
	for _, p := range paths {
		f, st, err := regularfile.Open(p)
		if err != nil {
			return fail(openErr("corpus", p, err))
		}
		closers = append(closers, f)
		c.files = append(c.files, f)
		c.names = append(c.names, p)
		c.starts = append(c.starts, c.starts[len(c.starts)-1]+st.Size())
	}
	name := paths[0]
	if len(paths) > 1 {
		name = fmt.Sprintf("%s and %d more files", paths[0], len(paths)-1)
	}
	tf := tokenFile{name: name, r: c, ntok: c.starts[len(c.files)], width: 1, cat: c}
	return newTokenDataset("corpus", name, []tokenFile{tf}, closers, opt)
}

// FortunesDir is where Debian's fortunes packages install their files.
const FortunesDir = "/usr/share/games/fortunes"

// Fortunes opens the fortune files of dir (the regular files, skipping
// *.dat indexes and *.u8 links, in name order) as one byte corpus.
func Fortunes(dir string, opt WindowOptions) (*TokenDataset, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, openErr("corpus", dir, err)
	}
	var paths []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || name[0] == '.' || hasSuffix(name, ".dat") || hasSuffix(name, ".u8") {
			continue
		}
		paths = append(paths, filepath.Join(dir, name))
	}
	if len(paths) == 0 {
		return nil, fileErr("corpus", dir, "no fortune files")
	}
	return OpenCorpus(paths, opt)
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}
