package parallel

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// ZeROConfig configures a sharded optimizer.
type ZeROConfig struct {
	// Stage 1 shards optimizer state; stage 2 shards gradients as well.
	Stage int
	// BucketBytes is the size of the buffer of one reduce-scatter or
	// all-gather (0: DefaultBucketBytes); each rank's part of it is
	// BucketBytes/Size. Counted as memory.Temporary while in use.
	BucketBytes int64
}

// ZeRO is an optimizer sharded across the ranks of a communicator
// (Rajbhandari et al., stages 1 and 2), built on optim.Optimizer.
//
// The parameters, in list order, are numbered as one flat vector of P
// elements, padded to Size·S with S = ⌈P/Size⌉; rank r owns the range
// [r·S, (r+1)·S) ∩ [0, P). When the optimizer keeps its state in blocks
// (8-bit Adam: one scale per device.Quant8Block elements; see
// optim.Optimizer.ElementsPer) every parameter starts at a multiple of the
// block size in the flat vector and S is rounded up to one, so shards
// begin on the parameters' own block boundaries and a checkpoint's blocks
// are the same whatever the number of ranks. An optimizer that updates
// each parameter whole (Adafactor; optim.Optimizer.ShardAlignment 0)
// gets whole parameters: one that would straddle a rank boundary starts
// at it, and S is the least that fits (shardLayout). Its optimizer is
// built (by the newOptimizer function given to NewZeRO) over views of the
// owned pieces of the parameters — a whole parameter with its own name
// and shape, a part of one 1-D and named "<path>[a:b]" — so optimizer
// state exists only for the owned elements: 8 bytes per owned element for
// Adam, 8·P/Size ± 8·(Size-1) bytes per rank. Parameters may be F32 or
// BF16 (see the package documentation for how BF16 ones are averaged and
// rounded).
//
// Step = ReduceGradients, then Update:
//   - ReduceGradients reduce-scatters the averaged gradients, bucket by
//     bucket, so that each rank ends with the average for its range. Stage
//     1 writes it into the owned part of the parameters' own gradients;
//     stage 2 then moves it into gradient buffers of the owned range only
//     (memory.Gradient, 4 bytes per owned element, 2 for BF16), releasing every full
//     gradient as soon as nothing owned is left in it, so that afterwards
//     Gradient holds 4·P/Size bytes. Stage 2 can instead reduce during
//     backward (ReduceDuringBackward).
//   - Update steps the shard optimizer, releases the shard gradients and
//     all-gathers the updated ranges so every rank holds all parameters.
type ZeRO struct {
	comm   Comm
	dev    device.Device
	stage  int
	f      *flat
	lo, hi int // owned flat range
	shard  int // S: elements per rank, padded
	chunk  int // elements per rank per bucket
	views  []*tensor.Tensor
	viewOf []segment // views[j] is elements [a, a+n) of params[i]
	opt    *optim.Optimizer
	ov     *overlap // stage 2's reduction during backward (overlap.go)
	// bucketBytes is ZeROConfig.BucketBytes (0: the default).
	bucketBytes int64
}

// NewZeRO shards params (distinct live contiguous F32 or BF16 tensors on
// one device, in the same order on every rank) across c's ranks, broadcasts
// rank 0's values to all ranks, and calls newOptimizer with this rank's
// shard views to build the optimizer that updates them, e.g.
//
//	z, err := parallel.NewZeRO(c, nn.Trainable(model), parallel.ZeROConfig{Stage: 2},
//		func(shard []*tensor.Tensor) (*optim.Optimizer, error) {
//			return optim.NewAdamW(shard, optim.AdamW{LR: 3e-4, WeightDecay: 0.1})
//		})
//
// A rank whose range is empty (more ranks than elements) gets an
// optimizer over no parameters.
func NewZeRO(c Comm, params []*tensor.Tensor, cfg ZeROConfig, newOptimizer func(shard []*tensor.Tensor) (*optim.Optimizer, error)) (*ZeRO, error) {
	if c == nil {
		return nil, fmt.Errorf("dist: zero: nil communicator")
	}
	if cfg.Stage != 1 && cfg.Stage != 2 {
		return nil, fmt.Errorf("dist: zero: stage %d; want 1 (optimizer state sharded) or 2 (gradients too)", cfg.Stage)
	}
	if newOptimizer == nil {
		return nil, fmt.Errorf("dist: zero: nil optimizer constructor")
	}
	dev, err := checkParams("zero", params)
	if err != nil {
		return nil, err
	}
	align, err := stateAlignment(newOptimizer)
	if err != nil {
		return nil, err
	}
	n := c.Size()
	f, S := shardLayout(append([]*tensor.Tensor(nil), params...), n, max(align, 1), align == 0)
	z := &ZeRO{comm: c, dev: dev, stage: cfg.Stage, f: f, shard: S, bucketBytes: cfg.BucketBytes}
	z.lo, z.hi = min(c.Rank()*S, f.total), min((c.Rank()+1)*S, f.total)
	z.chunk = max(min(bucketElems(cfg.BucketBytes)/n, S), 1)
	if err := broadcastFlat(c, dev, f, z.chunk*n, 0); err != nil {
		return nil, err
	}
	err = tensor.Catch(func() error {
		s := tensor.NewScope(tensor.NoGrad())
		defer s.Close()
		for _, sg := range f.segments(z.lo, z.hi) {
			p := f.params[sg.i]
			v := s.Keep(piece(s, p, sg))
			if whole(p, sg) {
				v.SetName(nameOf(p))
			} else {
				v.SetName(fmt.Sprintf("%s[%d:%d]", nameOf(p), sg.a, sg.a+sg.n))
			}
			v.SetRequiresGrad(true) // so that optim's norms and scalers see its gradient
			z.views = append(z.views, v)
			z.viewOf = append(z.viewOf, sg)
		}
		return nil
	})
	if err != nil {
		z.Release()
		return nil, err
	}
	z.opt, err = newOptimizer(append([]*tensor.Tensor(nil), z.views...))
	if err != nil {
		z.Release()
		return nil, fmt.Errorf("dist: zero: building the shard optimizer: %w", err)
	}
	if z.opt == nil {
		z.Release()
		return nil, fmt.Errorf("dist: zero: the optimizer constructor returned nil")
	}
	for j, v := range z.views {
		// BF16 parameters: each piece rounds with its parameter's bits.
		sg := z.viewOf[j]
		z.opt.SetRoundingOrigin(v, nameOf(f.params[sg.i]), sg.a)
	}
	return z, nil
}

// whole reports whether segment sg is all of parameter p.
func whole(p *tensor.Tensor, sg segment) bool { return sg.a == 0 && sg.n == p.Len() }

// piece is the view of t (a parameter, or a tensor shaped like it) that
// segment sg of the parameter is: t's own shape when sg is the whole
// parameter — Adafactor factors a matrix over its last two dimensions —
// and 1-D elements [a, a+n) otherwise.
func piece(s *tensor.Scope, t *tensor.Tensor, sg segment) *tensor.Tensor {
	if sg.a == 0 && sg.n == t.Len() {
		return s.Reshape(t, t.Shape()...)
	}
	return slice(s, t, sg.a, sg.n)
}

// stateAlignment asks an optimizer over no parameters where a parameter
// may be cut between ranks (optim.Optimizer.ShardAlignment): at multiples
// of the returned number of elements (1 for Adam; device.Quant8Block for
// 8-bit Adam, whose blocks of codes share a scale), or, for 0, nowhere:
// each rank then owns whole parameters (Adafactor).
func stateAlignment(newOptimizer func([]*tensor.Tensor) (*optim.Optimizer, error)) (int, error) {
	probe, err := newOptimizer(nil)
	if err != nil {
		return 0, fmt.Errorf("dist: zero: building the shard optimizer: %w", err)
	}
	if probe == nil {
		return 0, fmt.Errorf("dist: zero: the optimizer constructor returned nil")
	}
	defer probe.Release()
	return probe.ShardAlignment(), nil
}

// Optimizer is this rank's shard optimizer (its parameters are Shard()).
// Its state is what a checkpoint of this rank saves.
func (z *ZeRO) Optimizer() *optim.Optimizer { return z.opt }

// Shard returns the views of the parameter pieces this rank owns; between
// ReduceGradients and Update their Grad is the averaged gradient.
func (z *ZeRO) Shard() []*tensor.Tensor { return z.views }

// Range is this rank's flat range [lo, hi) and P, the number of elements
// of all parameters.
func (z *ZeRO) Range() (lo, hi, total int) { return z.lo, z.hi, z.f.total }

// Stage is 1 or 2.
func (z *ZeRO) Stage() int { return z.stage }

// Step reduces the gradients and updates the parameters (ReduceGradients,
// then Update). Call it once per optimizer step, after the last
// micro-batch's backward of an accumulation window, then release the
// parameters' gradients as usual (optim's ZeroGrad or SetGrad(nil)).
func (z *ZeRO) Step() error { return z.StepScaled(1) }

// StepScaled is Step with gradients multiplied by gradScale inside the
// update (1/loss-scale; see optim.Optimizer.StepScaled).
func (z *ZeRO) StepScaled(gradScale float64) error {
	if err := z.ReduceGradients(); err != nil {
		return err
	}
	return z.UpdateScaled(gradScale)
}

// ReduceGradients leaves in each shard view's Grad the average over the
// ranks of the gradient of its elements (see ZeRO). A parameter no rank
// has a gradient for gets none (its elements are not stepped); one only
// some ranks have is averaged with zeros from the others. Under stage 2
// the parameters' own gradients are released.
func (z *ZeRO) ReduceGradients() error {
	if z.ov != nil && z.ov.armed {
		return z.finishOverlap()
	}
	counts, err := syncPresence(z.comm, z.dev, z.f.params)
	if err != nil {
		return fmt.Errorf("dist: zero: %w", err)
	}
	err = tensor.Catch(func() error {
		s := tempScope()
		defer s.Close()
		for j, v := range z.views {
			sg := z.viewOf[j]
			p := z.f.params[sg.i]
			switch {
			case counts[sg.i] == 0:
				v.SetGrad(nil)
			default:
				// The reduction writes the owned average into the
				// parameter's own gradient; stage 2 compacts it below.
				v.SetGrad(s.Keep(piece(s, p.Grad(), sg)))
			}
		}
		return nil
	})
	if err != nil {
		z.dropShardGrads()
		return fmt.Errorf("dist: zero: %w", err)
	}
	n, r, S, k := z.comm.Size(), z.comm.Rank(), z.shard, z.chunk
	in, err := tensor.New(z.dev, tensor.F32, []int{n * k}, memory.Temporary)
	if err != nil {
		z.dropShardGrads()
		return fmt.Errorf("dist: zero: bucket: %w", err)
	}
	defer in.Release()
	out, err := tensor.New(z.dev, tensor.F32, []int{k}, memory.Temporary)
	if err != nil {
		z.dropShardGrads()
		return fmt.Errorf("dist: zero: bucket: %w", err)
	}
	defer out.Release()
	grad := func(i int) *tensor.Tensor { return z.f.params[i].Grad() }
	// the shard views cover [z.lo, z.hi) in order (with the gaps of an
	// aligned layout): a flat vector of their own
	sf := &flat{params: z.views, off: make([]int, len(z.views))}
	for j, sg := range z.viewOf {
		sf.off[j] = sg.pos - z.lo
		sf.total = sf.off[j] + sg.n
	}
	shardGrad := func(j int) *tensor.Tensor { return z.views[j].Grad() }
	for b := 0; b*k < S; b++ {
		kb := min(k, S-b*k)
		err := tensor.Catch(func() error {
			s := tempScope()
			defer s.Close()
			ib, ob := s.Narrow(in, 0, 0, n*kb), s.Narrow(out, 0, 0, kb)
			for q := range n {
				lo := q*S + b*k
				d := s.Narrow(ib, 0, q*kb, kb)
				z.f.gather(s, d, lo, lo+kb, grad)
				d.Release()
			}
			if err := z.comm.ReduceScatter(ob, ib, Avg); err != nil {
				return err
			}
			lo := r*S + b*k - z.lo
			sf.scatter(s, ob, lo, lo+kb, shardGrad)
			return nil
		})
		if err != nil {
			z.dropShardGrads()
			return fmt.Errorf("dist: zero: reduce-scatter of bucket %d: %w", b, err)
		}
	}
	if z.stage == 2 {
		if err := z.compactGrads(); err != nil {
			z.dropShardGrads()
			return fmt.Errorf("dist: zero: %w", err)
		}
	}
	return nil
}

// compactGrads (stage 2) moves each shard view's averaged gradient out of
// its parameter's full gradient into a buffer of its own and releases
// every full gradient as soon as nothing owned is left in it — at once
// for parameters this rank owns no piece of. Gradient bytes only fall:
// never more than the full gradients plus one view in flight, and 4 bytes
// per owned element at the end.
func (z *ZeRO) compactGrads() error {
	left := make([]int, len(z.f.params))
	for _, sg := range z.viewOf {
		left[sg.i]++
	}
	for i, p := range z.f.params {
		if left[i] == 0 {
			p.SetGrad(nil)
		}
	}
	return tensor.Catch(func() error {
		s := tempScope()
		defer s.Close()
		for j, v := range z.views {
			sg := z.viewOf[j]
			if full := v.Grad(); full != nil {
				g, err := tensor.New(z.dev, full.DType(), v.Shape(), memory.Gradient)
				if err != nil {
					return err
				}
				assign(s, g, full)
				v.SetGrad(g)
			}
			if left[sg.i]--; left[sg.i] == 0 {
				z.f.params[sg.i].SetGrad(nil)
			}
		}
		return nil
	})
}

// GradNorm is the global L2 norm of the averaged gradients, valid between
// ReduceGradients and Update: each rank's share of the sum of squares is
// all-reduced.
func (z *ZeRO) GradNorm() (float64, error) {
	local, err := optim.GradNorm(z.views)
	if err != nil {
		return 0, err
	}
	t, err := tensor.FromFloat32(z.dev, []float32{float32(local * local)}, []int{1}, memory.Temporary)
	if err != nil {
		return 0, err
	}
	defer t.Release()
	if err := z.comm.AllReduce(t, Sum); err != nil {
		return 0, err
	}
	return math.Sqrt(float64(t.Float32s()[0])), nil
}

// ClipGradNorm scales the shard gradients so that the global norm is at
// most maxNorm and returns the norm they had (see optim.ClipGradNorm);
// valid between ReduceGradients and Update.
func (z *ZeRO) ClipGradNorm(maxNorm float64) (float64, error) {
	var grads []*tensor.Tensor
	for _, v := range z.views {
		if g := v.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	return clipToNorm("zero", maxNorm, z.GradNorm, grads)
}

// clipToNorm scales grads, a rank's shard of every gradient, by
// maxNorm/norm when the global norm (globalNorm, a collective) exceeds
// maxNorm, and returns the norm they had; who names the caller in errors.
func clipToNorm(who string, maxNorm float64, globalNorm func() (float64, error), grads []*tensor.Tensor) (float64, error) {
	if math.IsNaN(maxNorm) || maxNorm <= 0 {
		return 0, fmt.Errorf("dist: %s: ClipGradNorm: max norm %v; want a number > 0", who, maxNorm)
	}
	norm, err := globalNorm()
	if err != nil || !(norm > maxNorm) || math.IsInf(norm, 0) {
		return norm, err
	}
	c := maxNorm / norm
	return norm, tensor.Catch(func() error {
		s := tempScope()
		defer s.Close()
		for _, g := range grads {
			s.MulScalarInPlace(g, c).Release()
		}
		return nil
	})
}

// Update steps the shard optimizer, releases the shard gradients and
// all-gathers the parameters. If the step fails on any rank, every rank
// returns an error (naming the ranks that failed) and no parameter is
// gathered.
func (z *ZeRO) Update() error { return z.UpdateScaled(1) }

// UpdateScaled is Update with gradients multiplied by gradScale inside
// the update.
func (z *ZeRO) UpdateScaled(gradScale float64) error {
	stepErr := z.opt.StepScaled(gradScale)
	z.dropShardGrads()
	n, r := z.comm.Size(), z.comm.Rank()
	status := make([]float32, n)
	if stepErr != nil {
		status[r] = 1
	}
	st, err := tensor.FromFloat32(z.dev, status, []int{n}, memory.Temporary)
	if err != nil {
		return fmt.Errorf("dist: zero: %w", err)
	}
	err = z.comm.AllReduce(st, Sum)
	status = st.Float32s()
	st.Release()
	if err != nil {
		return fmt.Errorf("dist: zero: %w", err)
	}
	if stepErr != nil {
		return fmt.Errorf("dist: zero: rank %d: %w", r, stepErr)
	}
	for q, v := range status {
		if v != 0 {
			return fmt.Errorf("dist: zero: the optimizer step failed on rank %d", q)
		}
	}
	return z.gatherParams()
}

// gatherParams all-gathers every rank's range of the parameters.
func (z *ZeRO) gatherParams() error {
	n, r, S, k := z.comm.Size(), z.comm.Rank(), z.shard, z.chunk
	if n == 1 {
		return nil
	}
	out, err := tensor.New(z.dev, tensor.F32, []int{n * k}, memory.Temporary)
	if err != nil {
		return fmt.Errorf("dist: zero: bucket: %w", err)
	}
	defer out.Release()
	in, err := tensor.New(z.dev, tensor.F32, []int{k}, memory.Temporary)
	if err != nil {
		return fmt.Errorf("dist: zero: bucket: %w", err)
	}
	defer in.Release()
	val := func(i int) *tensor.Tensor { return z.f.params[i] }
	for b := 0; b*k < S; b++ {
		kb := min(k, S-b*k)
		err := tensor.Catch(func() error {
			s := tempScope()
			defer s.Close()
			ib, ob := s.Narrow(in, 0, 0, kb), s.Narrow(out, 0, 0, n*kb)
			lo := r*S + b*k
			z.f.gather(s, ib, lo, lo+kb, val)
			if err := z.comm.AllGather(ob, ib); err != nil {
				return err
			}
			for q := range n {
				if q == r {
					continue
				}
				lo := q*S + b*k
				d := s.Narrow(ob, 0, q*kb, kb)
				z.f.scatter(s, d, lo, lo+kb, val)
				d.Release()
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("dist: zero: all-gather of bucket %d: %w", b, err)
		}
	}
	return nil
}

func (z *ZeRO) dropShardGrads() {
	for _, v := range z.views {
		v.SetGrad(nil)
	}
	z.disarm()
}

// Release frees the optimizer state and the shard views (the parameters
// stay).
func (z *ZeRO) Release() {
	z.disarm()
	if z.ov != nil {
		for _, p := range z.f.params {
			p.OnGradReady(nil)
		}
		z.ov = nil
	}
	if z.opt != nil {
		z.opt.Release()
	}
	for _, v := range z.views {
		v.Release()
	}
	z.views, z.viewOf = nil, nil
}
