package parallel

import (
	"github.com/memfit/memfit/optim"
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
func (z *ZeRO3) ExportFull() (optim.State, error) { return z.state().exportFull() }

// ImportFull loads a whole-model optimizer state (ExportFull's, or an
// unsharded optimizer's Export over the same parameters) into this rank's
// shard. Not a collective, but every rank must import the same state.
func (z *ZeRO3) ImportFull(full optim.State) error { return z.state().importFull(full) }

// state describes z's shards for ExportFull and ImportFull: the
// trainable parameters, group after group, and the layout above.
func (z *ZeRO3) state() *shardedState {
	type param struct {
		g *group3
		i int // in g.f.params
	}
	s := &shardedState{
		who: "zero3", what: "trainable parameter",
		comm: z.comm, dev: z.dev, chunk: z.chunk, opt: z.opt,
		views: z.views, local: z.local,
	}
	var all []param
	index := map[*group3]map[int]int{} // a trainable parameter's index in all
	for _, g := range z.groups {
		index[g] = map[int]int{}
		for _, i := range g.trainIdx {
			index[g][i] = len(all)
			all = append(all, param{g, i})
			s.params = append(s.params, g.f.params[i])
		}
	}
	for _, pc := range z.viewOf {
		s.pieces = append(s.pieces, statePiece{index[pc.g][pc.seg.i], pc.seg.a, pc.seg.n})
	}
	s.at = func(i, e int) (int, int) {
		g := all[i].g
		e += g.f.off[all[i].i] // in the group's flat layout
		q := e / g.S
		return q*z.local + g.base + e - q*g.S, (q+1)*g.S - e
	}
	return s
}
