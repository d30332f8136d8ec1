package parallel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// ZeroGrad releases the shard gradients and every parameter's gradient.
// Call it after each step, taken or skipped.
func (z *ZeRO) ZeroGrad() {
	z.dropShardGrads()
	for _, p := range z.f.params {
		p.SetGrad(nil)
	}
}

// ExportFull returns the optimizer state of the whole model, in the form
// an unsharded optimizer over the same parameters exports it (keys
// "<parameter path>.<buffer>", full shapes), so that a checkpoint does not
// depend on the number of ranks. It is a collective: every rank calls it
// and every rank gets the state. The buffers are all-gathered bucket by
// bucket (memory.Temporary, as Update's all-gather) and assembled on the
// host, 4 bytes per parameter element and buffer. Only a single parameter
// group is supported.
func (z *ZeRO) ExportFull() (optim.State, error) { return z.state().exportFull() }

// ImportFull loads a whole-model optimizer state (from ExportFull, or from
// an unsharded optimizer's Export over the same parameters) into this
// rank's shard: each rank takes its range. It is not a collective, but
// every rank must import the same state.
func (z *ZeRO) ImportFull(full optim.State) error { return z.state().importFull(full) }

// state describes z's shards for ExportFull and ImportFull: its flat
// vector is the ranks' local vectors laid end to end (rank q's range
// [q·S, (q+1)·S)).
func (z *ZeRO) state() *shardedState {
	pieces := make([]statePiece, len(z.viewOf))
	for j, sg := range z.viewOf {
		pieces[j] = statePiece{sg.i, sg.a, sg.n}
	}
	return &shardedState{
		who: "zero", what: "parameter",
		comm: z.comm, dev: z.dev, chunk: z.chunk, opt: z.opt,
		params: z.f.params, views: z.views, pieces: pieces, local: z.shard,
		at: func(i, e int) (int, int) { return z.f.off[i] + e, z.f.params[i].Len() - e },
	}
}

// shardedState is what exporting and importing the optimizer state of a
// sharded optimizer (ZeRO, stages 1 and 2, and ZeRO3) needs to know of
// it: the parameters an unsharded optimizer would hold, the pieces of
// them this rank's optimizer holds, and where every element of a
// parameter lies in the ranks' local vectors. The two sharded optimizers
// differ only in that layout (at).
type shardedState struct {
	who   string // "zero", "zero3": who the errors name
	what  string // what the errors call the parameters
	comm  Comm
	dev   device.Device
	chunk int // elements per rank per host all-gather
	opt   *optim.Optimizer
	// params are the parameters in the unsharded optimizer's order;
	// views[j] (a parameter of opt) is piece pieces[j] of one of them.
	params []*tensor.Tensor
	views  []*tensor.Tensor
	pieces []statePiece
	// local is the number of elements of each rank's local vector, a
	// multiple of every buffer's ElementsPer.
	local int
	// at says where element e of params[i] lies in the ranks' local
	// vectors laid end to end (rank q's from q·local on): its position,
	// and how many elements of the parameter from e on follow it there
	// (at least 1).
	at func(i, e int) (pos, n int)
}

// statePiece is elements [a, a+n) of parameter i.
type statePiece struct{ i, a, n int }

// errorf is an error of operation op ("export", "import") naming who.
func (s *shardedState) errorf(op, format string, args ...any) error {
	return fmt.Errorf("dist: "+s.who+": "+op+": "+format, args...)
}

// like returns an empty state with src's algorithm, step and group
// hyper-parameters, its group (if any) listing names.
func like(src optim.State, names []string) optim.State {
	st := optim.State{Algorithm: src.Algorithm, Step: src.Step, ParamSteps: map[string]int{}, Tensors: map[string]optim.StateTensor{}}
	if len(src.Groups) == 1 {
		st.Groups = []optim.GroupState{{LR: src.Groups[0].LR, WeightDecay: src.Groups[0].WeightDecay, Params: names}}
	}
	return st
}

func names(ts []*tensor.Tensor) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = nameOf(t)
	}
	return out
}

// exportFull gathers the state of every parameter: each buffer's shards
// are all-gathered as one vector (units of ElementsPer elements: shards
// and parameters start on multiples of it) and each parameter's units
// read from where at puts them.
func (s *shardedState) exportFull() (optim.State, error) {
	shard, err := s.opt.Export()
	if err != nil {
		return optim.State{}, s.errorf("export", "%w", err)
	}
	if len(shard.Groups) > 1 {
		return optim.State{}, s.errorf("export", "%d parameter groups; the sharded optimizer supports one", len(shard.Groups))
	}
	if s.opt.ShardAlignment() == 0 {
		return s.exportWhole(shard)
	}
	np := len(s.params)
	// Per parameter: whether it has state, and its update count. Every
	// owner of a piece of the parameter agrees on both; the others say 0.
	meta := make([]float32, 2*np)
	for j, v := range s.views {
		if steps, ok := shard.ParamSteps[v.Name()]; ok {
			i := s.pieces[j].i
			meta[i], meta[np+i] = 1, float32(steps)
		}
	}
	if meta, err = allReduceHost(s.comm, s.dev, meta, Max); err != nil {
		return optim.State{}, s.errorf("export", "%w", err)
	}
	full := like(shard, names(s.params))
	r := s.comm.Rank()
	for _, b := range s.opt.Buffers() {
		k := s.opt.ElementsPer(b)
		local := make([]float32, s.local/k)
		for j, v := range s.views {
			if t, ok := shard.Tensors[v.Name()+"."+b]; ok {
				pos, _ := s.at(s.pieces[j].i, s.pieces[j].a)
				copy(local[(pos-r*s.local)/k:], t.Data)
			}
		}
		all, err := allGatherHost(s.comm, s.dev, s.chunk, local)
		if err != nil {
			return optim.State{}, fmt.Errorf("dist: %s: export of %s: %w", s.who, b, err)
		}
		for i, p := range s.params {
			if meta[i] == 0 {
				continue
			}
			shape, units := slices.Clone(p.Shape()), p.Len()
			if k > 1 {
				units = (units + k - 1) / k
				shape = []int{units}
			}
			full.Tensors[nameOf(p)+"."+b] = optim.StateTensor{Shape: shape, Data: s.units(all, i, k, units)}
		}
	}
	for i, p := range s.params {
		if meta[i] != 0 {
			full.ParamSteps[nameOf(p)] = int(meta[np+i])
		}
	}
	return full.Compact(), nil
}

// units returns the first n units (of k elements) of parameter i in all,
// the gathered vector of a buffer: a slice of all where they lie in one
// run, a copy otherwise.
func (s *shardedState) units(all []float32, i, k, n int) []float32 {
	var data []float32
	for u := 0; u < n; {
		pos, run := s.at(i, u*k)
		m := min(n-u, (run+k-1)/k)
		if u == 0 && m == n {
			return all[pos/k : pos/k+n]
		}
		if data == nil {
			data = make([]float32, n)
		}
		u += copy(data[u:u+m], all[pos/k:])
	}
	if data == nil {
		data = []float32{}
	}
	return data
}

// importFull checks full against the parameters and imports this rank's
// pieces of it.
func (s *shardedState) importFull(full optim.State) error {
	bad := func(format string, args ...any) error { return s.errorf("import", format, args...) }
	if len(full.Groups) > 1 {
		return bad("state has %d parameter groups; the sharded optimizer supports one", len(full.Groups))
	}
	byName := map[string]int{}
	for i, p := range s.params {
		byName[nameOf(p)] = i
	}
	// Pieces are whole parameters with the optimizer's own shapes
	// (Adafactor), which the optimizer checks; otherwise ranges of
	// ElementsPer units.
	whole := s.opt.ShardAlignment() == 0
	bufs := s.opt.Buffers()
	for key, t := range full.Tensors {
		k := strings.LastIndexByte(key, '.')
		if k < 0 || !slices.Contains(bufs, key[k+1:]) {
			return bad("state tensor %s is not <parameter>.<%s>", key, strings.Join(bufs, "|"))
		}
		i, ok := byName[key[:k]]
		if !ok {
			return bad("state for %s: no such %s in this model", key[:k], s.what)
		}
		if k := s.opt.ElementsPer(key[k+1:]); !whole && len(t.Data) != (s.params[i].Len()+k-1)/k {
			return bad("state tensor %s holds %d values; the parameter has %d elements (one value per %d)", key, len(t.Data), s.params[i].Len(), k)
		}
	}
	shard := like(full, names(s.views))
	for j, v := range s.views {
		pc := s.pieces[j]
		name := nameOf(s.params[pc.i])
		steps, ok := full.ParamSteps[name]
		if !ok {
			continue
		}
		shard.ParamSteps[v.Name()] = steps
		for _, b := range bufs {
			t, ok := full.Tensors[name+"."+b]
			switch {
			case whole && ok:
				shard.Tensors[v.Name()+"."+b] = optim.StateTensor{Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
			case whole:
			case !ok:
				return bad("state for %s has no %s", name, b)
			default:
				k := s.opt.ElementsPer(b) // pc.a is a multiple of k
				lo, hi := pc.a/k, (pc.a+pc.n+k-1)/k
				shape := []int{hi - lo}
				if k == 1 {
					shape = v.Shape() // the parameter's own, for a whole one
				}
				shard.Tensors[v.Name()+"."+b] = optim.StateTensor{Shape: shape, Data: slices.Clone(t.Data[lo:hi])}
			}
		}
	}
	if err := s.opt.Import(shard); err != nil {
		return bad("%w", err)
	}
	return nil
}

// exportWhole is exportFull for an optimizer whose state is per whole
// parameter (Adafactor; only ZeRO's stages 1 and 2 take it), each
// parameter owned by one rank. Its shapes are the optimizer's own (a
// matrix's row and column statistics), which only the owner knows: the
// ranks first agree on every state tensor's shape, then all-gather each
// rank's tensors, concatenated.
func (s *shardedState) exportWhole(shard optim.State) (optim.State, error) {
	fail := func(err error) (optim.State, error) { return optim.State{}, s.errorf("export", "%w", err) }
	np, bufs := len(s.params), s.opt.Buffers()
	D := 1 // the most dimensions of a state tensor: a parameter's
	for _, p := range s.params {
		D = max(D, p.Dim())
	}
	// Per parameter: has state, update count; then per parameter and
	// buffer: has the buffer, its dimensions, its shape.
	w := 2 + D
	meta := make([]float32, 2*np+np*len(bufs)*w)
	for j, v := range s.views {
		i := s.pieces[j].i
		steps, ok := shard.ParamSteps[v.Name()]
		if !ok {
			continue
		}
		meta[i], meta[np+i] = 1, float32(steps)
		for bi, b := range bufs {
			t, ok := shard.Tensors[v.Name()+"."+b]
			if !ok {
				continue
			}
			m := meta[2*np+(i*len(bufs)+bi)*w:][:w]
			m[0], m[1] = 1, float32(len(t.Shape))
			for d, n := range t.Shape {
				m[2+d] = float32(n)
			}
		}
	}
	meta, err := allReduceHost(s.comm, s.dev, meta, Max)
	if err != nil {
		return fail(err)
	}
	shapeOf := func(i, bi int) ([]int, bool) {
		m := meta[2*np+(i*len(bufs)+bi)*w:][:w]
		if m[0] == 0 {
			return nil, false
		}
		shape := make([]int, int(m[1]))
		for d := range shape {
			shape[d] = int(m[2+d])
		}
		return shape, true
	}
	// Rank q's tensors, in parameter and buffer order, concatenated.
	owner := func(i int) int {
		pos, _ := s.at(i, 0)
		return min(pos/max(s.local, 1), s.comm.Size()-1)
	}
	lens := make([]int, s.comm.Size())
	for i := range s.params {
		for bi := range bufs {
			if shape, ok := shapeOf(i, bi); ok {
				lens[owner(i)] += numel(shape)
			}
		}
	}
	L := slices.Max(lens)
	local := make([]float32, 0, L)
	for i, p := range s.params {
		if owner(i) != s.comm.Rank() {
			continue
		}
		for bi, b := range bufs {
			if _, ok := shapeOf(i, bi); ok {
				local = append(local, shard.Tensors[nameOf(p)+"."+b].Data...)
			}
		}
	}
	if len(local) != lens[s.comm.Rank()] {
		return fail(fmt.Errorf("rank %d holds %d state values, its shapes say %d", s.comm.Rank(), len(local), lens[s.comm.Rank()]))
	}
	all, err := allGatherHost(s.comm, s.dev, s.chunk, append(local, make([]float32, L-len(local))...))
	if err != nil {
		return fail(err)
	}
	full := like(shard, names(s.params))
	at := make([]int, s.comm.Size())
	for i, p := range s.params {
		if meta[i] != 0 {
			full.ParamSteps[nameOf(p)] = int(meta[np+i])
		}
		q := owner(i)
		for bi, b := range bufs {
			if shape, ok := shapeOf(i, bi); ok {
				n := numel(shape)
				full.Tensors[nameOf(p)+"."+b] = optim.StateTensor{Shape: shape, Data: all[q*L+at[q] : q*L+at[q]+n]}
				at[q] += n
			}
		}
	}
	return full.Compact(), nil
}

// allGatherHost concatenates every rank's local (all of one length) in
// rank order, at most chunk elements per rank per collective.
func allGatherHost(c Comm, dev device.Device, chunk int, local []float32) ([]float32, error) {
	n, r, S, k := c.Size(), c.Rank(), len(local), min(chunk, max(len(local), 1))
	all := make([]float32, n*S)
	copy(all[r*S:], local)
	if n == 1 {
		return all, nil
	}
	for lo := 0; lo < S; lo += k {
		kb := min(k, S-lo)
		in, err := tensor.FromFloat32(dev, local[lo:lo+kb], []int{kb}, memory.Temporary)
		if err != nil {
			return nil, err
		}
		out, err := tensor.New(dev, tensor.F32, []int{n * kb}, memory.Temporary)
		if err != nil {
			in.Release()
			return nil, err
		}
		err = c.AllGather(out, in)
		vals := out.Float32s()
		in.Release()
		out.Release()
		if err != nil {
			return nil, err
		}
		for q := range n {
			copy(all[q*S+lo:q*S+lo+kb], vals[q*kb:(q+1)*kb])
		}
	}
	return all, nil
}

// numel is the number of elements of a shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
