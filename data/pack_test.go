package data

import (
	"reflect"
	"strings"
	"testing"
)

func seq(in []int32, pos ...int32) Sequence {
	tg := make([]int32, len(in))
	for i, x := range in {
		tg[i] = x + 100
	}
	s := Sequence{Input: in, Target: tg}
	if len(pos) > 0 {
		s.Position = pos
	}
	return s
}

func TestBatchPadsSequencesToTheLongest(t *testing.T) {
	const ig = IgnoreIndex
	cases := []struct {
		name     string
		seqs     []Sequence
		shape    []int
		tokens   []int32
		targets  []int32
		pos      []int32
		padding  int
		trained  int
		fraction float64
	}{
		{"unpacked, growing", []Sequence{seq([]int32{1, 2}), seq([]int32{3, 4, 5, 6}), seq([]int32{7})}, []int{3, 4},
			[]int32{1, 2, 0, 0, 3, 4, 5, 6, 7, 0, 0, 0},
			[]int32{101, 102, ig, ig, 103, 104, 105, 106, 107, ig, ig, ig}, nil, 5, 7, 5.0 / 12},
		{"packed", []Sequence{seq([]int32{1, 2, 3}, 0, 1, 0), seq([]int32{4, 5, 6, 7, 8}, 0, 1, 2, 0, 1)}, []int{2, 5},
			[]int32{1, 2, 3, 0, 0, 4, 5, 6, 7, 8},
			[]int32{101, 102, 103, ig, ig, 104, 105, 106, 107, 108},
			[]int32{0, 1, 0, 1, 2, 0, 1, 2, 0, 1}, 2, 8, 0.2},
		{"packed after unpacked", []Sequence{seq([]int32{1, 2}), seq([]int32{3, 4, 5}, 0, 0, 1)}, []int{2, 3},
			[]int32{1, 2, 0, 3, 4, 5},
			[]int32{101, 102, ig, 103, 104, 105},
			[]int32{0, 1, 2, 0, 0, 1}, 1, 5, 1.0 / 6},
		{"one row", []Sequence{seq([]int32{9, 9, 9}, 0, 1, 2)}, []int{1, 3},
			[]int32{9, 9, 9}, []int32{109, 109, 109}, []int32{0, 1, 2}, 0, 3, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBatch(0, 0, len(c.seqs))
			for j, s := range c.seqs {
				if err := b.put(j, len(c.seqs), s); err != nil {
					t.Fatal(err)
				}
			}
			if !reflect.DeepEqual(b.InputShape, c.shape) || !reflect.DeepEqual(b.TargetShape, c.shape) {
				t.Errorf("shapes %v %v, want %v", b.InputShape, b.TargetShape, c.shape)
			}
			if !reflect.DeepEqual(b.Tokens, c.tokens) || !reflect.DeepEqual(b.Targets, c.targets) || !reflect.DeepEqual(b.Positions, c.pos) {
				t.Errorf("tokens %v targets %v positions %v\nwant %v %v %v", b.Tokens, b.Targets, b.Positions, c.tokens, c.targets, c.pos)
			}
			if b.Padding != c.padding || b.TrainedTokens() != c.trained || b.PaddingFraction() != c.fraction {
				t.Errorf("padding %d trained %d fraction %v, want %d %d %v", b.Padding, b.TrainedTokens(), b.PaddingFraction(), c.padding, c.trained, c.fraction)
			}
			if want := int64(4 * (len(c.tokens) + len(c.targets) + len(c.pos))); b.Bytes() != want {
				t.Errorf("bytes %d, want %d", b.Bytes(), want)
			}
			b.Recycle()
		})
	}
}

func TestBatchSequenceErrors(t *testing.T) {
	w := Window{Input: []int32{1, 2}, Target: []int32{2, 3}}
	for _, c := range []struct {
		name string
		exs  []Example
		want string
	}{
		{"window after sequence", []Example{seq([]int32{1, 2}), w}, "window of 2 tokens in a batch of sequences"},
		{"sequence after window", []Example{w, seq([]int32{1, 2})}, "sequence of 2 tokens in a batch of windows of 2 tokens"},
		{"empty", []Example{Sequence{}}, "sequence of 0 input"},
		{"targets", []Example{Sequence{Input: []int32{1}, Target: []int32{1, 2}}}, "1 input and 2 target"},
		{"positions", []Example{seq([]int32{1, 2}, 0)}, "2 tokens with 1 positions"},
		{"mid-example", []Example{seq([]int32{1, 2}, 3, 4)}, "starts at position 3"},
	} {
		b := newBatch(0, 0, len(c.exs))
		var err error
		for j, ex := range c.exs {
			if err = b.put(j, len(c.exs), ex); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestBatchSequencesReuseArrays: once recycled arrays are wide enough,
// assembling a batch of Sequences allocates nothing.
func TestBatchSequencesReuseArrays(t *testing.T) {
	// Boxed once, as Dataset.Get returns them.
	seqs := []Example{seq([]int32{1, 2}, 0, 1), seq([]int32{3, 4, 5, 6, 7}, 0, 1, 2, 0, 1), seq([]int32{8}, 0)}
	fill := func() {
		b := newBatch(0, 0, len(seqs))
		for j, s := range seqs {
			if err := b.put(j, len(seqs), s); err != nil {
				t.Fatal(err)
			}
		}
		b.Recycle()
	}
	fill()
	if n := testing.AllocsPerRun(50, fill); n != 0 {
		t.Errorf("%v allocations per batch of recycled arrays", n)
	}
}

func TestPacker(t *testing.T) {
	for _, c := range []struct {
		lengths []int
		context int
		want    []int32
	}{
		{[]int{3, 3, 3}, 6, []int32{0, 2, 3}},
		{[]int{6, 1, 5, 2}, 6, []int32{0, 1, 3, 4}},
		{[]int{1, 1, 1, 1}, 10, []int32{0, 4}},
		{nil, 4, []int32{0}},
	} {
		p := newPacker(c.context)
		for _, l := range c.lengths {
			p.add(l)
		}
		if got := p.windows(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("lengths %v in %d: windows %v, want %v", c.lengths, c.context, got, c.want)
		}
	}
}
