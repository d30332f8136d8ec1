package parallel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// A rank's local vector is its shards, group after group (group g's at
// g.base, S elements); element e of group g's flat layout lies on rank
// e / S at local position g.base + e mod S. A buffer kept in units of k
// elements (8-bit scales) is laid out the same, in units: S, g.base and
// every parameter's start are multiples of k.

// ExportFull returns the optimizer state of the whole model in the form
// an unsharded optimizer over the trainable parameters exports it, as
// ZeRO.ExportFull does, so a checkpoint of a ZeRO-3 run resumes on any
// rank count, with or without ZeRO. A collective; every rank gets it.
func (z *ZeRO3) ExportFull() (optim.State, error) {
	shard, err := z.opt.Export()
	if err != nil {
		return optim.State{}, fmt.Errorf("dist: zero3: export: %w", err)
	}
	if len(shard.Groups) > 1 {
		return optim.State{}, fmt.Errorf("dist: zero3: export: %d parameter groups; the sharded optimizer supports one", len(shard.Groups))
	}
	type param struct {
		g *group3
		i int
	}
	var all []param
	for _, g := range z.groups {
		for _, i := range g.trainIdx {
			all = append(all, param{g, i})
		}
	}
	pos := map[*group3]map[int]int{} // trainable parameter -> index in all
	for k, p := range all {
		if pos[p.g] == nil {
			pos[p.g] = map[int]int{}
		}
		pos[p.g][p.i] = k
	}
	np := len(all)
	meta := make([]float32, 2*np)
	for j, v := range z.views {
		if steps, ok := shard.ParamSteps[v.Name()]; ok {
			k := pos[z.viewOf[j].g][z.viewOf[j].seg.i]
			meta[k], meta[np+k] = 1, float32(steps)
		}
	}
	if meta, err = allReduceHost(z.comm, z.dev, meta, Max); err != nil {
		return optim.State{}, fmt.Errorf("dist: zero3: export: %w", err)
	}
	full := optim.State{Algorithm: shard.Algorithm, Step: shard.Step, ParamSteps: map[string]int{}, Tensors: map[string]optim.StateTensor{}}
	if len(shard.Groups) == 1 {
		gs := optim.GroupState{LR: shard.Groups[0].LR, WeightDecay: shard.Groups[0].WeightDecay}
		for _, p := range all {
			gs.Params = append(gs.Params, nameOf(p.g.f.params[p.i]))
		}
		full.Groups = []optim.GroupState{gs}
	}
	r := z.comm.Rank()
	for _, b := range z.opt.Buffers() {
		k := z.opt.ElementsPer(b)
		L := z.local / k
		local := make([]float32, L)
		for j, v := range z.views {
			pc := z.viewOf[j]
			if t, ok := shard.Tensors[v.Name()+"."+b]; ok {
				copy(local[(pc.g.base+pc.seg.pos-r*pc.g.S)/k:], t.Data)
			}
		}
		vals, err := allGatherHost(z.comm, z.dev, z.chunk, local)
		if err != nil {
			return optim.State{}, fmt.Errorf("dist: zero3: export of %s: %w", b, err)
		}
		for n, p := range all {
			if meta[n] == 0 {
				continue
			}
			t := p.g.f.params[p.i]
			shape, units := slices.Clone(t.Shape()), t.Len()
			if k > 1 {
				units = (units + k - 1) / k
				shape = []int{units}
			}
			data := make([]float32, units)
			S := p.g.S
			for u := range data {
				e := p.g.f.off[p.i] + u*k // its flat position in the group
				q := e / S
				data[u] = vals[q*L+(p.g.base+e-q*S)/k]
			}
			full.Tensors[nameOf(t)+"."+b] = optim.StateTensor{Shape: shape, Data: data}
		}
	}
	for n, p := range all {
		if meta[n] != 0 {
			full.ParamSteps[nameOf(p.g.f.params[p.i])] = int(meta[np+n])
		}
	}
	return full.Compact(), nil
}

// ImportFull loads a whole-model optimizer state (ExportFull's, or an
// unsharded optimizer's Export over the same parameters) into this rank's
// shard. Not a collective, but every rank must import the same state.
func (z *ZeRO3) ImportFull(full optim.State) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dist: zero3: import: "+format, args...)
	}
	if len(full.Groups) > 1 {
		return bad("state has %d parameter groups; the sharded optimizer supports one", len(full.Groups))
	}
	byName := map[string]*tensor.Tensor{}
	for _, g := range z.groups {
		for _, i := range g.trainIdx {
			byName[nameOf(g.f.params[i])] = g.f.params[i]
		}
	}
	bufs := z.opt.Buffers()
	for key, t := range full.Tensors {
		k := strings.LastIndexByte(key, '.')
		if k < 0 || !slices.Contains(bufs, key[k+1:]) {
			return bad("state tensor %s is not <parameter>.<%s>", key, strings.Join(bufs, "|"))
		}
		p, ok := byName[key[:k]]
		if !ok {
			return bad("state for %s: no such trainable parameter in this model", key[:k])
		}
		if k := z.opt.ElementsPer(key[k+1:]); len(t.Data) != (p.Len()+k-1)/k {
			return bad("state tensor %s holds %d values; the parameter has %d elements (one value per %d)", key, len(t.Data), p.Len(), k)
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
		sg := z.viewOf[j].seg
		name := nameOf(z.viewOf[j].g.f.params[sg.i])
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
			k := z.opt.ElementsPer(b)
			lo, hi := sg.a/k, (sg.a+sg.n+k-1)/k
			shard.Tensors[v.Name()+"."+b] = optim.StateTensor{Shape: []int{hi - lo}, Data: slices.Clone(t.Data[lo:hi])}
		}
	}
	if err := z.opt.Import(shard); err != nil {
		return fmt.Errorf("dist: zero3: import: %w", err)
	}
	return nil
}
