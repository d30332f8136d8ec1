package accumulate

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// Micro is one micro-batch: views of the batch's rows and the weight its
// mean loss carries in the window.
type Micro struct {
	Inputs, Targets *tensor.Tensor
	Weight          float64
	// Lo and Hi are the batch's rows it holds, [Lo, Hi): where its
	// share of what goes with the rows on the host lies (a packed
	// batch's positions).
	Lo, Hi int
}

// Release drops the micro-batch's views.
func (m Micro) Release() {
	m.Inputs.Release()
	m.Targets.Release()
}

// Split cuts a batch (inputs and targets share dimension 0) into n
// micro-batches of sizes as equal as possible, weighted by their share of
// the rows. The micro-batches are views: they cost no memory.
func Split(inputs, targets *tensor.Tensor, n int) ([]Micro, error) {
	return split(inputs, targets, n, nil)
}

// SplitTokens is Split for token losses: each micro-batch is weighted by
// its share of the window's targets that are not ignore, so that per-token
// means over uneven micro-batches (padding, ignored positions) add up to
// the mean over the whole window.
func SplitTokens(inputs, targets *tensor.Tensor, n int, ignore int) ([]Micro, error) {
	return split(inputs, targets, n, &ignore)
}

func split(inputs, targets *tensor.Tensor, n int, ignore *int) ([]Micro, error) {
	if n < 1 {
		return nil, fmt.Errorf("accumulate: %d micro-batches; want at least 1", n)
	}
	rows := inputs.Shape()[0]
	if targets.Shape()[0] != rows {
		return nil, fmt.Errorf("accumulate: inputs have %d rows, targets %d", rows, targets.Shape()[0])
	}
	if n > rows {
		return nil, fmt.Errorf("accumulate: %d micro-batches for a batch of %d", n, rows)
	}
	if ignore != nil && !device.StoresValues(targets.Device()) {
		// A plan's targets hold no values to count: every row counts
		// alike, as the rows' shares say (and reading B·T zeros for each
		// traced step was much of a long-context -fit's time).
		ignore = nil
	}
	var counts []int // counted targets per row
	total := 0
	if ignore != nil {
		per := targets.Len() / max(rows, 1)
		vals := targets.Int64s()
		counts = make([]int, rows)
		for r := 0; r < rows; r++ {
			for _, v := range vals[r*per : (r+1)*per] {
				if v != int64(*ignore) {
					counts[r]++
				}
			}
			total += counts[r]
		}
	}
	s := tensor.NewScope(tensor.NoGrad())
	defer s.Close()
	out := make([]Micro, n)
	for i := range out {
		lo, hi := rows*i/n, rows*(i+1)/n
		w := float64(hi-lo) / float64(rows)
		if ignore != nil {
			c := 0
			for _, k := range counts[lo:hi] {
				c += k
			}
			w = float64(c) / float64(max(total, 1))
		}
		out[i] = Micro{
			Inputs:  s.Keep(s.Narrow(inputs, 0, lo, hi-lo)),
			Targets: s.Keep(s.Narrow(targets, 0, lo, hi-lo)),
			Weight:  w,
			Lo:      lo, Hi: hi,
		}
	}
	return out, nil
}

// Window runs loss on each micro-batch in a scope of its own, scales it by
// the micro-batch's weight and runs backward, so gradients accumulate in
// the parameters while only one micro-batch's activations are alive. It
// returns the window's loss (the weighted sum). loss must return a scalar
// mean over its micro-batch; opts configure each micro-batch's scope
// (autocast). scale, when not nil, multiplies the weighted loss before
// backward (a GradScaler's Scale). Panics of tensor ops become errors.
func Window(micro []Micro, loss func(s *tensor.Scope, m Micro) *tensor.Tensor, scale func(s *tensor.Scope, l *tensor.Tensor) *tensor.Tensor, opts ...tensor.ScopeOption) (float64, error) {
	var total float64
	for _, m := range micro {
		err := tensor.Step(func(s *tensor.Scope) error {
			l := loss(s, m)
			total += m.Weight * l.Item()
			w := s.MulScalar(l, m.Weight)
			if scale != nil {
				w = scale(s, w)
			}
			w.Backward()
			return nil
		}, opts...)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
