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
func (z *ZeRO) ExportFull() (optim.State, error) {
	shard, err := z.opt.Export()
	if err != nil {
		return optim.State{}, fmt.Errorf("dist: zero: export: %w", err)
	}
	if len(shard.Groups) > 1 {
		return optim.State{}, fmt.Errorf("dist: zero: export: %d parameter groups; the sharded optimizer supports one", len(shard.Groups))
	}
	if z.opt.ShardAlignment() == 0 {
		return z.exportWhole(shard)
	}
	np := len(z.f.params)
	// Per parameter: whether it has state, and its update count. Every
	// owner of a piece of the parameter agrees on both; the others say 0.
	meta := make([]float32, 2*np)
	for j, v := range z.views {
		if steps, ok := shard.ParamSteps[v.Name()]; ok {
			i := z.viewOf[j].i
			meta[i], meta[np+i] = 1, float32(steps)
		}
	}
	if meta, err = z.allReduceHost(meta, Max); err != nil {
		return optim.State{}, fmt.Errorf("dist: zero: export: %w", err)
	}
	full := optim.State{
		Algorithm:  shard.Algorithm,
		Step:       shard.Step,
		ParamSteps: map[string]int{},
		Tensors:    map[string]optim.StateTensor{},
	}
	if len(shard.Groups) == 1 {
		g := optim.GroupState{LR: shard.Groups[0].LR, WeightDecay: shard.Groups[0].WeightDecay}
		for _, p := range z.f.params {
			g.Params = append(g.Params, nameOf(p))
		}
		full.Groups = []optim.GroupState{g}
	}
	for _, b := range z.opt.Buffers() {
		// A buffer with one element per k parameter elements (8-bit
		// scales) is gathered in units of k: shards and parameters start
		// on multiples of k (see ZeRO).
		k := z.opt.ElementsPer(b)
		local := make([]float32, z.shard/k)
		for j, v := range z.views {
			if t, ok := shard.Tensors[v.Name()+"."+b]; ok {
				copy(local[(z.viewOf[j].pos-z.lo)/k:], t.Data)
			}
		}
		all, err := z.allGatherHost(local)
		if err != nil {
			return optim.State{}, fmt.Errorf("dist: zero: export of %s: %w", b, err)
		}
		for i, p := range z.f.params {
			if meta[i] == 0 {
				continue
			}
			shape, n := slices.Clone(p.Shape()), p.Len()
			if k > 1 {
				n = (n + k - 1) / k
				shape = []int{n}
			}
			full.Tensors[nameOf(p)+"."+b] = optim.StateTensor{Shape: shape, Data: all[z.f.off[i]/k : z.f.off[i]/k+n]}
		}
	}
	for i, p := range z.f.params {
		if meta[i] != 0 {
			full.ParamSteps[nameOf(p)] = int(meta[np+i])
		}
	}
	return full.Compact(), nil
}

// ImportFull loads a whole-model optimizer state (from ExportFull, or from
// an unsharded optimizer's Export over the same parameters) into this
// rank's shard: each rank takes its range. It is not a collective, but
// every rank must import the same state.
func (z *ZeRO) ImportFull(full optim.State) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dist: zero: import: "+format, args...)
	}
	if len(full.Groups) > 1 {
		return bad("state has %d parameter groups; the sharded optimizer supports one", len(full.Groups))
	}
	byName := map[string]int{}
	for i, p := range z.f.params {
		byName[nameOf(p)] = i
	}
	if z.opt.ShardAlignment() == 0 {
		return z.importWhole(full, byName)
	}
	bufs := z.opt.Buffers()
	for key, t := range full.Tensors {
		k := strings.LastIndexByte(key, '.')
		if k < 0 || !slices.Contains(bufs, key[k+1:]) {
			return bad("state tensor %s is not <parameter>.<%s>", key, strings.Join(bufs, "|"))
		}
		i, ok := byName[key[:k]]
		if !ok {
			return bad("state for %s: no such parameter in this model", key[:k])
		}
		if k := z.opt.ElementsPer(key[k+1:]); len(t.Data) != (z.f.params[i].Len()+k-1)/k {
			return bad("state tensor %s holds %d values; the parameter has %d elements (one value per %d)", key, len(t.Data), z.f.params[i].Len(), k)
		}
	}
	shard := optim.State{Algorithm: full.Algorithm, Step: full.Step, ParamSteps: map[string]int{}, Tensors: map[string]optim.StateTensor{}}
	if len(full.Groups) == 1 {
		g := optim.GroupState{LR: full.Groups[0].LR, WeightDecay: full.Groups[0].WeightDecay}
		for _, v := range z.views {
			g.Params = append(g.Params, v.Name())
		}
		shard.Groups = []optim.GroupState{g}
	}
	for j, v := range z.views {
		sg := z.viewOf[j]
		name := nameOf(z.f.params[sg.i])
		steps, ok := full.ParamSteps[name]
		if !ok {
			continue
		}
		shard.ParamSteps[v.Name()] = steps
		for _, b := range bufs {
			t, ok := full.Tensors[name+"."+b]
			if !ok {
				return bad("state for %s has no %s", name, b)
			}
			k := z.opt.ElementsPer(b) // sg.a is a multiple of k (see ZeRO)
			lo, hi := sg.a/k, (sg.a+sg.n+k-1)/k
			shape := []int{hi - lo}
			if k == 1 {
				shape = v.Shape() // the parameter's own, for a whole one
			}
			shard.Tensors[v.Name()+"."+b] = optim.StateTensor{Shape: shape, Data: slices.Clone(t.Data[lo:hi])}
		}
	}
	if err := z.opt.Import(shard); err != nil {
		return fmt.Errorf("dist: zero: import: %w", err)
	}
	return nil
}

// exportWhole is ExportFull for an optimizer whose state is per whole
// parameter (Adafactor), each parameter owned by one rank. Its shapes are
// the optimizer's own (a matrix's row and column statistics), which only
// the owner knows: the ranks first agree on every state tensor's shape,
// then all-gather each rank's tensors, concatenated.
func (z *ZeRO) exportWhole(shard optim.State) (optim.State, error) {
	fail := func(err error) (optim.State, error) {
		return optim.State{}, fmt.Errorf("dist: zero: export: %w", err)
	}
	np, bufs := len(z.f.params), z.opt.Buffers()
	D := 1 // the most dimensions of a state tensor: a parameter's
	for _, p := range z.f.params {
		D = max(D, p.Dim())
	}
	// Per parameter: has state, update count; then per parameter and
	// buffer: has the buffer, its dimensions, its shape.
	w := 2 + D
	meta := make([]float32, 2*np+np*len(bufs)*w)
	for j, v := range z.views {
		i := z.viewOf[j].i
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
	meta, err := z.allReduceHost(meta, Max)
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
	owner := func(i int) int { return min(z.f.off[i]/max(z.shard, 1), z.comm.Size()-1) }
	lens := make([]int, z.comm.Size())
	for i := range z.f.params {
		for bi := range bufs {
			if shape, ok := shapeOf(i, bi); ok {
				lens[owner(i)] += numel(shape)
			}
		}
	}
	L := slices.Max(lens)
	local := make([]float32, 0, L)
	for i, p := range z.f.params {
		if owner(i) != z.comm.Rank() {
			continue
		}
		for bi, b := range bufs {
			if _, ok := shapeOf(i, bi); ok {
				local = append(local, shard.Tensors[nameOf(p)+"."+b].Data...)
			}
		}
	}
	if len(local) != lens[z.comm.Rank()] {
		return fail(fmt.Errorf("rank %d holds %d state values, its shapes say %d", z.comm.Rank(), len(local), lens[z.comm.Rank()]))
	}
	all, err := z.allGatherHost(append(local, make([]float32, L-len(local))...))
	if err != nil {
		return fail(err)
	}
	full := optim.State{Algorithm: shard.Algorithm, Step: shard.Step, ParamSteps: map[string]int{}, Tensors: map[string]optim.StateTensor{}}
	if len(shard.Groups) == 1 {
		g := optim.GroupState{LR: shard.Groups[0].LR, WeightDecay: shard.Groups[0].WeightDecay}
		for _, p := range z.f.params {
			g.Params = append(g.Params, nameOf(p))
		}
		full.Groups = []optim.GroupState{g}
	}
	at := make([]int, z.comm.Size())
	for i, p := range z.f.params {
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

// importWhole is ImportFull for an optimizer whose state is per whole
// parameter: each rank takes its parameters' tensors as they are (its
// views bear the parameters' names and shapes), and the optimizer checks
// their shapes.
func (z *ZeRO) importWhole(full optim.State, byName map[string]int) error {
	bufs := z.opt.Buffers()
	for key := range full.Tensors {
		k := strings.LastIndexByte(key, '.')
		if k < 0 || !slices.Contains(bufs, key[k+1:]) {
			return fmt.Errorf("dist: zero: import: state tensor %s is not <parameter>.<%s>", key, strings.Join(bufs, "|"))
		}
		if _, ok := byName[key[:k]]; !ok {
			return fmt.Errorf("dist: zero: import: state for %s: no such parameter in this model", key[:k])
		}
	}
	shard := optim.State{Algorithm: full.Algorithm, Step: full.Step, ParamSteps: map[string]int{}, Tensors: map[string]optim.StateTensor{}}
	if len(full.Groups) == 1 {
		g := optim.GroupState{LR: full.Groups[0].LR, WeightDecay: full.Groups[0].WeightDecay}
		for _, v := range z.views {
			g.Params = append(g.Params, v.Name())
		}
		shard.Groups = []optim.GroupState{g}
	}
	for _, v := range z.views {
		name := v.Name() // a whole parameter's
		steps, ok := full.ParamSteps[name]
		if !ok {
			continue
		}
		shard.ParamSteps[name] = steps
		for _, b := range bufs {
			if t, ok := full.Tensors[name+"."+b]; ok {
				shard.Tensors[name+"."+b] = optim.StateTensor{Shape: slices.Clone(t.Shape), Data: slices.Clone(t.Data)}
			}
		}
	}
	if err := z.opt.Import(shard); err != nil {
		return fmt.Errorf("dist: zero: import: %w", err)
	}
	return nil
}

// allReduceHost reduces a host vector over the ranks through a device
// tensor (memory.Temporary).
func (z *ZeRO) allReduceHost(v []float32, op Op) ([]float32, error) {
	return allReduceHost(z.comm, z.dev, v, op)
}

// allGatherHost concatenates every rank's local (this rank's part of a
// flat vector: z.shard elements, or fewer for a buffer kept per block)
// into the vector of Size·len(local) elements, bucket by bucket.
func (z *ZeRO) allGatherHost(local []float32) ([]float32, error) {
	return allGatherHost(z.comm, z.dev, z.chunk, local)
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
