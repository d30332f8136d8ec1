package tensor_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// lmHeadGradCases are LinearCrossEntropy's finite-difference checks (run
// by TestGradients): uneven chunks, one row per chunk, a bias, and every
// option of the loss.
var lmHeadGradCases = []gradCase{
	{name: "linear_cross_entropy/chunks-of-4", inputs: []input{in("", 2, 5, 3), in("", 6, 3), in("idx:6", 2, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LinearCrossEntropy(x[0], x[1], nil, x[2], tensor.CrossEntropyOptions{}, 4)
	}},
	{name: "linear_cross_entropy/rows-of-1+bias", inputs: []input{in("", 4, 3), in("", 5, 3), in("", 5), in("idx:5", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LinearCrossEntropy(x[0], x[1], x[2], x[3], tensor.CrossEntropyOptions{}, 1)
	}},
	{name: "linear_cross_entropy/ignore+smoothing", inputs: []input{in("", 6, 4), in("", 5, 4), in("idx:5", 6)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LinearCrossEntropy(x[0], x[1], nil, x[2], tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(2), LabelSmoothing: 0.1}, 4)
	}},
	{name: "linear_cross_entropy/sum", inputs: []input{in("", 5, 3), in("", 4, 3), in("idx:4", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LinearCrossEntropy(x[0], x[1], nil, x[2], tensor.CrossEntropyOptions{Reduction: tensor.SumReduction}, 2)
	}},
	// The head tied to the embedding: w's gradient arrives from both.
	{name: "linear_cross_entropy/tied", inputs: []input{in("", 6, 3), in("idx:6", 2, 4), in("idx:6", 2, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		h := s.Tanh(s.Embedding(x[0], x[1]))
		return s.LinearCrossEntropy(h, x[0], nil, x[2], tensor.CrossEntropyOptions{}, 3)
	}},
}

// lmHeadCase is one comparison of LinearCrossEntropy with the composed
// Linear and CrossEntropy.
type lmHeadCase struct {
	name      string
	rows, dim int // rows of x, its width
	vocab     int
	chunk     int // rows per chunk (0: automatic)
	bias      bool
	tied      bool // x is an embedding of w (a tied head)
	opts      tensor.CrossEntropyOptions
	ignored   int64 // a target value planted in every fifth row
}

var lmHeadCases = []lmHeadCase{
	{name: "uneven-chunks", rows: 37, dim: 16, vocab: 50, chunk: 8},
	{name: "one-chunk", rows: 37, dim: 16, vocab: 50},
	{name: "rows-of-1", rows: 9, dim: 8, vocab: 11, chunk: 1},
	{name: "bias", rows: 37, dim: 16, vocab: 50, chunk: 10, bias: true},
	{name: "default-ignore", rows: 37, dim: 16, vocab: 50, chunk: 8, ignored: -100},
	{name: "ignore+smoothing", rows: 37, dim: 16, vocab: 50, chunk: 8, ignored: -1, opts: tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(-1), LabelSmoothing: 0.1}},
	{name: "sum", rows: 37, dim: 16, vocab: 50, chunk: 16, opts: tensor.CrossEntropyOptions{Reduction: tensor.SumReduction}},
	// Under autocast the weight's 16-bit copy (10 MB) exceeds
	// LMHeadCastBytes: it is cast in two blocks of vocabulary rows.
	{name: "cast-in-blocks", rows: 12, dim: 512, vocab: 10000, chunk: 5, bias: true},
	{name: "tied", rows: 37, dim: 16, vocab: 50, chunk: 8, tied: true},
}

// lmHeadRun is a loss and the gradients of x (or, tied, nothing), w and b.
type lmHeadRun struct {
	loss  float64
	grads [][]float64
}

// runLMHead computes c's loss and gradients, chunked or composed, for
// parameters of dtype (F64 or F32) and an optional autocast dtype.
func runLMHead(t *testing.T, dev device.Device, c lmHeadCase, dtype, autocast tensor.DType, chunked bool) lmHeadRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, uint64(c.rows*c.vocab)))
	param := func(shape ...int) *tensor.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float64, n)
		for i := range v {
			v[i] = 2*rng.Float64() - 1
		}
		p, err := tensor.FromFloat64(dev, v, shape, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		if dtype != tensor.F64 {
			s := tensor.NewScope(tensor.NoGrad())
			q := s.Keep(s.Cast(p, dtype))
			s.Close()
			p.Release()
			p = q
		}
		return p.SetRequiresGrad(true)
	}
	ints := func(n, k int, plant bool) *tensor.Tensor {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(k))
			if plant && c.ignored != 0 && i%5 == 0 {
				v[i] = int32(c.ignored)
			}
		}
		x, err := tensor.FromInt32(dev, v, []int{n}, memory.Data)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	w := param(c.vocab, c.dim)
	var x, b, tokens *tensor.Tensor
	if c.tied {
		tokens = ints(c.rows, c.vocab, false)
	} else {
		x = param(c.rows, c.dim)
	}
	if c.bias {
		b = param(c.vocab)
	}
	targets := ints(c.rows, c.vocab, true)
	var opts []tensor.ScopeOption
	if autocast != device.Invalid {
		opts = append(opts, tensor.Autocast(autocast))
	}
	var run lmHeadRun
	err := tensor.Step(func(s *tensor.Scope) error {
		h := x
		if c.tied {
			h = s.Tanh(s.Embedding(w, tokens))
		}
		var loss *tensor.Tensor
		if chunked {
			loss = s.LinearCrossEntropy(h, w, b, targets, c.opts, c.chunk)
		} else {
			loss = s.CrossEntropy(s.Linear(h, w, b), targets, c.opts)
		}
		run.loss = loss.Item()
		loss.Backward()
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*tensor.Tensor{x, w, b} {
		if p == nil {
			continue
		}
		if p.Grad() == nil {
			t.Fatalf("%v: no gradient", p.Shape())
		}
		run.grads = append(run.grads, p.Grad().Float64s())
		p.Release()
	}
	targets.Release()
	if tokens != nil {
		tokens.Release()
	}
	return run
}

// relDiff is ‖a-b‖/‖b‖ (|a-b|/|b| for scalars), 0 when both are 0.
func relDiff(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		num += (a[i] - b[i]) * (a[i] - b[i])
		den += b[i] * b[i]
	}
	if num == 0 {
		return 0
	}
	return math.Sqrt(num / den)
}

// The chunked head gives the composed path's loss and gradients: within
// rounding in F64 and F32 (the weight gradient is summed over chunks in
// another order), within the amp tests' tolerance under bf16 autocast
// (where it also skips the composed path's rounding of the weight
// gradient to bf16).
func TestLinearCrossEntropyMatchesComposed(t *testing.T) {
	for _, p := range []struct {
		name            string
		dtype, autocast tensor.DType
		tol             float64
		without         bool // the cross-entropy kernels' composed fallbacks
	}{
		{"f64", tensor.F64, device.Invalid, 1e-12, false},
		{"f32", tensor.F32, device.Invalid, 1e-5, false},
		{"f32-without-fused", tensor.F32, device.Invalid, 1e-5, true},
		{"bf16", tensor.F32, tensor.BF16, 5e-3, false},
	} {
		for _, c := range lmHeadCases {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				var dev device.Device = cpu.New()
				if p.without {
					dev = device.Without(dev)
				}
				want := runLMHead(t, dev, c, p.dtype, p.autocast, false)
				got := runLMHead(t, dev, c, p.dtype, p.autocast, true)
				if d := relDiff([]float64{got.loss}, []float64{want.loss}); d > p.tol {
					t.Errorf("loss %.9g, composed %.9g (relative %.2g > %.2g)", got.loss, want.loss, d, p.tol)
				}
				for i := range want.grads {
					if d := relDiff(got.grads[i], want.grads[i]); d > p.tol {
						t.Errorf("gradient %d: relative difference %.2g > %.2g", i, d, p.tol)
					}
				}
				if n := dev.Memory().Stats().Requested.Current; n != 0 {
					t.Errorf("%d bytes still allocated", n)
				}
			})
		}
	}
}

// Forward and backward give the same bits run to run.
func TestLinearCrossEntropyDeterministic(t *testing.T) {
	c := lmHeadCases[0]
	c.rows, c.vocab, c.chunk = 300, 200, 64
	for _, ac := range []tensor.DType{device.Invalid, tensor.BF16} {
		dev := cpu.New()
		a := runLMHead(t, dev, c, tensor.F32, ac, true)
		b := runLMHead(t, dev, c, tensor.F32, ac, true)
		if a.loss != b.loss {
			t.Errorf("autocast %v: loss %v then %v", ac, a.loss, b.loss)
		}
		for i := range a.grads {
			for j := range a.grads[i] {
				if a.grads[i][j] != b.grads[i][j] {
					t.Fatalf("autocast %v: gradient %d element %d: %v then %v", ac, i, j, a.grads[i][j], b.grads[i][j])
				}
			}
		}
	}
}

// The [rows, vocab] logits never exist: forward and backward together
// peak at the chunk's logits and their gradient plus the small tensors,
// where the composed path holds the whole logits and their gradient. The
// weight's gradient goes straight into the leaf's, so no temporary of the
// weight's size exists either.
func TestLinearCrossEntropyMemory(t *testing.T) {
	const rows, dim, vocab, chunk = 512, 16, 4096, 32
	for _, tc := range []struct {
		name    string
		chunked bool
	}{{"composed", false}, {"chunked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := meta.New(0)
			x := mustNew(t, dev, []int{rows, dim}, memory.Activation).SetRequiresGrad(true)
			w := mustNew(t, dev, []int{vocab, dim}, memory.Parameter).SetRequiresGrad(true)
			tg, err := tensor.FromInt32(dev, make([]int32, rows), []int{rows}, memory.Data)
			if err != nil {
				t.Fatal(err)
			}
			mem := dev.Memory()
			base := mem.Stats().Requested.Current
			mem.ResetPeak()
			err = tensor.Step(func(s *tensor.Scope) error {
				var l *tensor.Tensor
				if tc.chunked {
					l = s.LinearCrossEntropy(x, w, nil, tg, tensor.CrossEntropyOptions{}, chunk)
				} else {
					l = s.CrossEntropy(s.Linear(x, w, nil), tg, tensor.CrossEntropyOptions{})
				}
				l.Backward()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			st := mem.Stats()
			peak := st.Requested.Peak - base
			logits := int64(rows * vocab * 4)
			grads := int64((rows + vocab) * dim * 4) // x's and w's
			t.Logf("peak above inputs %d bytes (logits %d, gradients %d); temporary peak %d", peak, logits, grads, st.Category(memory.Temporary).Peak)
			if tc.chunked {
				// At the peak (backward, inside a chunk): the chunk's
				// logits and their gradient, the per-row upstream
				// gradient, x's gradient (a temporary until its leaf
				// adopts it), w's gradient (the leaf's own from the
				// start), the loss and its seed.
				chunkBytes := 2 * int64(chunk*vocab*4)
				if want := chunkBytes + rows*4 + grads + 2*4; peak != want {
					t.Errorf("peak %d bytes above the inputs, want exactly %d", peak, want)
				}
				if tmp, want := st.Category(memory.Temporary).Peak, chunkBytes+rows*4+rows*dim*4+4; tmp != want {
					t.Errorf("temporary peak %d, want %d: no [vocab, dim] temporary of w's gradient", tmp, want)
				}
			} else if peak < 2*logits {
				t.Errorf("composed peak %d is below twice the logits (%d): the test no longer shows what it means to", peak, 2*logits)
			}
			x.Release()
			w.Release()
			tg.Release()
			if n := mem.Stats().Requested.Current; n != 0 {
				t.Errorf("%d bytes still allocated", n)
			}
		})
	}
}

// Under autocast a weight whose 16-bit copy exceeds LMHeadCastBytes is
// cast in blocks of vocabulary rows: no temporary of the weight's size
// exists, forward or backward.
func TestLinearCrossEntropyCastsInBlocks(t *testing.T) {
	const rows, dim, vocab, chunk = 64, 512, 20000, 16
	dev := meta.New(0)
	x := mustNew(t, dev, []int{rows, dim}, memory.Activation).SetRequiresGrad(true)
	w := mustNew(t, dev, []int{vocab, dim}, memory.Parameter).SetRequiresGrad(true)
	tg, err := tensor.FromInt32(dev, make([]int32, rows), []int{rows}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	mem := dev.Memory()
	mem.ResetPeak()
	err = tensor.Step(func(s *tensor.Scope) error {
		l := s.LinearCrossEntropy(x, w, nil, tg, tensor.CrossEntropyOptions{}, chunk)
		l.Backward()
		return nil
	}, tensor.Autocast(tensor.BF16))
	if err != nil {
		t.Fatal(err)
	}
	tmp := mem.Stats().Category(memory.Temporary).Peak
	whole := int64(vocab * dim * 2)
	chunkBytes := int64(2 * chunk * vocab * 2) // a chunk's bf16 logits and their gradient
	// The rest: x's bf16 cast and gradient, the per-row losses, the loss.
	if limit := chunkBytes + tensor.LMHeadCastBytes + 3*rows*dim*4; tmp > limit || tmp >= whole {
		t.Errorf("temporary peak %d bytes; want at most %d, and below the whole bf16 weight (%d)", tmp, limit, whole)
	}
	t.Logf("temporary peak %d bytes; the whole bf16 weight is %d", tmp, whole)
	x.Release()
	w.Release()
	tg.Release()
}

func mustNew(t *testing.T, dev device.Device, shape []int, cat memory.Category) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(dev, tensor.F32, shape, cat)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// Gradients accumulate over backward passes into the leaf's own gradient
// (micro-batches), and a leaf's OnGradReady hook fires once per pass even
// though the op wrote the gradient itself.
func TestLinearCrossEntropyAccumulates(t *testing.T) {
	dev := cpu.New()
	c := lmHeadCases[0]
	// Two passes on the same leaves: the gradients double.
	xv := make([]float64, c.rows*c.dim)
	wv := make([]float64, c.vocab*c.dim)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range xv {
		xv[i] = 2*r.Float64() - 1
	}
	for i := range wv {
		wv[i] = 2*r.Float64() - 1
	}
	x, _ := tensor.FromFloat64(dev, xv, []int{c.rows, c.dim}, memory.Parameter)
	w, _ := tensor.FromFloat64(dev, wv, []int{c.vocab, c.dim}, memory.Parameter)
	x.SetRequiresGrad(true)
	w.SetRequiresGrad(true)
	tv := make([]int32, c.rows)
	for i := range tv {
		tv[i] = int32(r.IntN(c.vocab))
	}
	tg, _ := tensor.FromInt32(dev, tv, []int{c.rows}, memory.Data)
	ready := 0
	w.OnGradReady(func(*tensor.Tensor) { ready++ })
	var first []float64
	for pass := 1; pass <= 2; pass++ {
		err := tensor.Step(func(s *tensor.Scope) error {
			s.LinearCrossEntropy(x, w, nil, tg, tensor.CrossEntropyOptions{}, c.chunk).Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if ready != pass {
			t.Errorf("pass %d: OnGradReady fired %d times", pass, ready)
		}
		if pass == 1 {
			first = w.Grad().Float64s()
		}
	}
	if cat := dev.Memory().Stats().Category(memory.Gradient).Current; cat != int64(8*(c.rows+c.vocab)*c.dim) {
		t.Errorf("gradient bytes %d, want those of x and w", cat)
	}
	for i, g := range w.Grad().Float64s() {
		if d := math.Abs(g - 2*first[i]); d > 1e-12*math.Max(1, math.Abs(g)) {
			t.Fatalf("element %d: %v after two passes, %v after one", i, g, first[i])
		}
	}
	x.Release()
	w.Release()
	tg.Release()
}

// Inputs that do not fit are errors that say which op and what.
func TestLinearCrossEntropyErrors(t *testing.T) {
	dev := cpu.New()
	x := mustNew(t, dev, []int{4, 3}, memory.Activation)
	w := mustNew(t, dev, []int{5, 3}, memory.Parameter)
	w2 := mustNew(t, dev, []int{5, 2}, memory.Parameter)
	b := mustNew(t, dev, []int{4}, memory.Parameter)
	tg, _ := tensor.FromInt32(dev, make([]int32, 4), []int{4}, memory.Data)
	tg3, _ := tensor.FromInt32(dev, make([]int32, 3), []int{3}, memory.Data)
	defer func() {
		for _, t := range []*tensor.Tensor{x, w, w2, b, tg, tg3} {
			t.Release()
		}
	}()
	before := dev.Memory().Stats().Requested.Current
	for _, c := range []struct {
		name       string
		x, w, b, t *tensor.Tensor
		chunk      int
	}{
		{"width", x, w2, nil, tg, 0},
		{"bias", x, w, b, tg, 0},
		{"targets", x, w, nil, tg3, 0},
		{"float targets", x, w, nil, x, 0},
		{"chunk", x, w, nil, tg, -1},
	} {
		err := tensor.Step(func(s *tensor.Scope) error {
			s.LinearCrossEntropy(c.x, c.w, c.b, c.t, tensor.CrossEntropyOptions{}, c.chunk)
			return nil
		})
		var te *tensor.Error
		if !errors.As(err, &te) {
			t.Errorf("%s: got %v, want a *tensor.Error", c.name, err)
			continue
		}
		if want := "linear_cross_entropy"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q does not name %s", c.name, err, want)
		}
	}
	if n := dev.Memory().Stats().Requested.Current; n != before {
		t.Errorf("%d bytes allocated after the failed ops, %d before: one leaked", n, before)
	}
}

// The automatic chunk keeps a chunk's logits and their gradient within
// LMHeadChunkBytes.
func TestLinearCrossEntropyChunkRows(t *testing.T) {
	for _, c := range []struct {
		vocab int
		dtype tensor.DType
		want  int
	}{
		{50304, tensor.BF16, 166},
		{50304, tensor.F32, 83},
		{256, tensor.F32, 16384},
		{1 << 30, tensor.F32, 1},
	} {
		got := tensor.LinearCrossEntropyChunkRows(c.vocab, c.dtype)
		if got != c.want {
			t.Errorf("vocab %d %v: %d rows, want %d", c.vocab, c.dtype, got, c.want)
		}
		if c.want > 1 && 2*got*c.vocab*c.dtype.Size() > tensor.LMHeadChunkBytes {
			t.Errorf("vocab %d %v: %d rows exceed the budget", c.vocab, c.dtype, got)
		}
	}
}

// A 16-bit weight's gradient summed in parts of vocabulary rows (one pass
// over the chunks each) has the bits of the whole sum rounded once, and
// so do the loss and the other gradients: with uneven parts, parts of one
// row, a bias, a tied head (the embedding adding its rows after), and a
// weight cast in blocks (parts then hold whole blocks).
func TestLinearCrossEntropySumsInParts(t *testing.T) {
	for _, p := range []struct {
		name     string
		c        lmHeadCase
		dtype    tensor.DType
		partRows int // rows of F32 sum a part may hold
	}{
		{"uneven", lmHeadCases[0], tensor.BF16, 15},
		{"row-by-row", lmHeadCases[0], tensor.BF16, 1},
		{"bias", lmHeadCases[3], tensor.BF16, 16},
		{"ignore+smoothing", lmHeadCases[5], tensor.F16, 20},
		{"tied", lmHeadCases[8], tensor.BF16, 7},
		{"cast-in-blocks", lmHeadCases[7], tensor.F16, 3000},
	} {
		t.Run(p.name, func(t *testing.T) {
			run := func(parts bool) lmHeadRun {
				if parts {
					defer tensor.SetLMHeadSumBytes(int64(4 * p.partRows * p.c.dim))()
				}
				return runLMHead(t, cpu.New(), p.c, p.dtype, tensor.BF16, true)
			}
			want, got := run(false), run(true)
			if math.Float64bits(got.loss) != math.Float64bits(want.loss) {
				t.Errorf("loss %v, whole %v", got.loss, want.loss)
			}
			for i := range want.grads {
				for j := range want.grads[i] {
					if math.Float64bits(got.grads[i][j]) != math.Float64bits(want.grads[i][j]) {
						t.Fatalf("gradient %d element %d: %v, summed whole %v", i, j, got.grads[i][j], want.grads[i][j])
					}
				}
			}
		})
	}
}

// Summed in parts, a 16-bit weight's gradient costs the gradient and one
// part's F32 sum at the peak, not the whole F32 sum and its rounded copy.
func TestLinearCrossEntropyPartsPeak(t *testing.T) {
	const rows, dim, vocab, chunk = 64, 512, 20000, 16
	peak := func(partBytes int64) int64 {
		defer tensor.SetLMHeadSumBytes(partBytes)()
		dev := meta.New(0)
		x := mustNew(t, dev, []int{rows, dim}, memory.Activation).SetRequiresGrad(true)
		defer x.Release()
		s := tensor.NewScope(tensor.NoGrad())
		w := s.Keep(s.Cast(mustNew(t, dev, []int{vocab, dim}, memory.Parameter), tensor.BF16)).SetRequiresGrad(true)
		s.Close()
		defer w.Release()
		tg, err := tensor.FromInt32(dev, make([]int32, rows), []int{rows}, memory.Data)
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Release()
		mem := dev.Memory()
		base := mem.Stats().Requested.Current
		mem.ResetPeak()
		err = tensor.Step(func(s *tensor.Scope) error {
			l := s.LinearCrossEntropy(x, w, nil, tg, tensor.CrossEntropyOptions{}, chunk)
			l.Backward()
			return nil
		}, tensor.Autocast(tensor.BF16))
		if err != nil {
			t.Fatal(err)
		}
		return mem.Stats().Requested.Peak - base
	}
	grad, sum := int64(vocab*dim*2), int64(vocab*dim*4)
	whole := peak(tensor.LMHeadSumBytes)
	parts := peak(sum / 4)
	// The whole sum's peak is at its rounding, after the last chunk;
	// the parts' while a chunk's logits and their gradient exist, with
	// the small tensors (x's gradient and cast, the per-row losses).
	logits, small := int64(2*chunk*vocab*2), int64(4*rows*dim*4)
	if saved := whole - parts; saved < sum-sum/4-logits-small {
		t.Errorf("in four parts the peak is %d bytes, whole %d: %d less, want at least three parts (%d) less a chunk's logits (%d) and the small tensors", parts, whole, saved, sum-sum/4, logits)
	}
	if parts > grad+sum/4+logits+small {
		t.Errorf("in four parts the peak is %d bytes: above the gradient (%d), a part (%d), a chunk's logits and the small tensors", parts, grad, sum/4)
	}
	t.Logf("peak over the step: %d bytes summed whole, %d in four parts", whole, parts)
}
