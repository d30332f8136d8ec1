package data

import "fmt"

// Sequence is a run of tokens of its own length: one fine-tuning example,
// or several packed into one window. Target[t] is the label of the token
// after Input[t] (IgnoreIndex where it is not trained). Position, when
// set, is each token's position within its example, restarting at 0 where
// an example starts; nil means 0, 1, ..., len-1 (a single example).
//
// A batch of Sequences is padded to its longest (see Batch).
type Sequence struct {
	Input    []int32
	Target   []int32
	Position []int32
}

func (Sequence) example() {}

// PadToken is the input token of padded positions. Their targets are
// IgnoreIndex and they come after every real token of their row, so with
// causal attention nothing reads them: any id in the vocabulary would do.
const PadToken = 0

// putSequence stores s as example j of a batch of n Sequences, padding
// every row to the longest so far: a longer example widens the rows
// already stored (within the recycled arrays' capacity when it allows).
// Padded positions get PadToken, IgnoreIndex and positions that go on
// counting from the row's last, so they never start an example.
func (b *Batch) putSequence(j, n int, s Sequence) error {
	l := len(s.Input)
	switch {
	case l == 0 || len(s.Target) != l:
		return fmt.Errorf("sequence of %d input and %d target tokens", l, len(s.Target))
	case s.Position != nil && len(s.Position) != l:
		return fmt.Errorf("sequence of %d tokens with %d positions", l, len(s.Position))
	case s.Position != nil && s.Position[0] != 0:
		return fmt.Errorf("sequence starts at position %d, not at an example's start", s.Position[0])
	}
	if j == 0 {
		b.Tokens = reuse(b.spare.tokens, n*l)
		b.Targets = reuse(b.spare.targets, n*l)
		b.InputShape = append(b.spare.inShape[:0], n, l)
		b.TargetShape = append(b.spare.tgtShape[:0], n, l)
		b.Positions = nil
		b.Padding = 0
		b.seq = true
	} else if !b.seq {
		return fmt.Errorf("sequence of %d tokens in a batch of %s", l, b.kind())
	}
	if s.Position != nil && b.Positions == nil {
		// The first packed example of the batch: rows before it count
		// from 0.
		t := b.InputShape[1]
		b.Positions = reuse(b.spare.positions, n*t)
		for r := range j {
			for c := range t {
				b.Positions[r*t+c] = int32(c)
			}
		}
	}
	if t := b.InputShape[1]; l > t {
		b.widen(j, n, t, l)
	}
	t := b.InputShape[1]
	row := j * t
	copy(b.Tokens[row:], s.Input)
	copy(b.Targets[row:], s.Target)
	for c := l; c < t; c++ {
		b.Tokens[row+c] = PadToken
		b.Targets[row+c] = IgnoreIndex
	}
	if b.Positions != nil {
		if s.Position != nil {
			copy(b.Positions[row:], s.Position)
		} else {
			for c := range l {
				b.Positions[row+c] = int32(c)
			}
		}
		for c := l; c < t; c++ {
			b.Positions[row+c] = b.Positions[row+c-1] + 1
		}
	}
	b.Padding += t - l
	return nil
}

// widen moves rows [0, j) of a batch of n rows from width t to width w,
// padding each.
func (b *Batch) widen(j, n, t, w int) {
	grow := func(buf []int32) []int32 {
		if cap(buf) >= n*w {
			buf = buf[:n*w]
		} else {
			nb := make([]int32, n*w)
			copy(nb, buf[:j*t])
			buf = nb
		}
		// From the last row back: row r moves from r·t to r·w ≥ r·t.
		for r := j - 1; r >= 0; r-- {
			copy(buf[r*w:r*w+t], buf[r*t:r*t+t])
		}
		return buf
	}
	b.Tokens, b.Targets = grow(b.Tokens), grow(b.Targets)
	if b.Positions != nil {
		b.Positions = grow(b.Positions)
	}
	for r := range j {
		for c := t; c < w; c++ {
			b.Tokens[r*w+c] = PadToken
			b.Targets[r*w+c] = IgnoreIndex
			if b.Positions != nil {
				b.Positions[r*w+c] = b.Positions[r*w+c-1] + 1
			}
		}
	}
	b.InputShape[1], b.TargetShape[1] = w, w
	b.Padding += j * (w - t)
}

// TrainedTokens returns the number of targets that are trained: those
// that are not IgnoreIndex. The loss of a step is the mean over these;
// a batch of Windows trains every target.
func (b *Batch) TrainedTokens() int {
	n := 0
	for _, t := range b.Targets {
		if t != IgnoreIndex {
			n++
		}
	}
	return n
}

// PaddingFraction returns the fraction of the batch's token positions
// that are padding (0 for Windows and packed windows of one row).
func (b *Batch) PaddingFraction() float64 {
	if len(b.Tokens) == 0 {
		return 0
	}
	return float64(b.Padding) / float64(len(b.Tokens))
}

// packer packs examples, in order, into windows of at most context
// positions: next-fit, so a window holds consecutive examples and the
// examples stay in the dataset's order (one packed window of a batch holds
// the examples an unpacked batch would). An example is never split; the
// caller cuts those longer than the context first.
type packer struct {
	context, used int
	n             int32   // examples added
	starts        []int32 // each window's first example
}

func newPacker(context int) *packer { return &packer{context: context, used: context} }

// add adds an example of l positions (1 <= l <= context).
func (p *packer) add(l int) {
	if p.used+l > p.context {
		p.starts = append(p.starts, p.n)
		p.used = 0
	}
	p.used += l
	p.n++
}

// windows returns each window's first example, then the example count.
func (p *packer) windows() []int32 { return append(p.starts, p.n) }
