package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
)

// A fitAxis is a technique's place in -fit's search: the settings of it
// the search may try, and what each costs.
type fitAxis struct {
	// tier 0 is exact: every exact technique's options are combined and
	// the combinations planned cheapest first by their estimated cost.
	// A higher tier is an approximate method (or, last, offloading),
	// tried only when nothing of the lower tiers fits: the search runs
	// the exact combinations again over each of its options, lower
	// tiers varying fastest.
	tier int
	// options lists c with this technique set to each value the search
	// may try, c itself first.
	options func(c Config) []Config
	// cost is this technique's factor in the estimated step time of c
	// relative to orig, the configuration as given (exact tier only).
	cost func(c, orig Config) float64
	// show names the flags -fit's choice states even unchanged (the
	// others it states when it changes them).
	show []string
	// keepsState, set for an exact axis none of whose options changes
	// the bytes of the parameters or of the optimizer state, clears the
	// technique's setting in c: configurations alike after it have the
	// same model state, so one plan's bytes of it bound the others'
	// peaks (fitWith skips them when that alone exceeds the budget).
	keepsState func(c *Config)
}

// Choice is a configuration Fit found, with its predicted peak.
type Choice struct {
	Config Config
	Peak   PeakBytes
	Cost   float64 // estimated step time relative to the configuration as given
}

// Flags is the choice as the command-line flags that turn the
// configuration as given into it ("-accum 4 -amp bf16 -checkpoint
// sqrt"), the way -fit prints it everywhere.
func (c Choice) Flags(from Config) string { return ChangedFlags(from, c.Config, fitShown()...) }

// Need is what the choice needs of the budget: its peak, with the host
// memory of -offload on a device whose memory is the host's (the CPU).
func (c Choice) Need() int64 { return need(c.Config, c.Peak) }

// fitShown are the flags -fit's choice always states.
func fitShown() []string {
	var out []string
	for _, t := range techniques {
		if t.fit != nil {
			out = append(out, t.fit.show...)
		}
	}
	return out
}

// Fit chooses the cheapest change to cfg whose predicted peak fits budget
// bytes, trying the techniques' settings (their fitAxis) in this order:
// the exact ones together, cheapest first by estimated cost — the
// optimizer step inside backward (exact and about free; only without
// accumulation, fp16, clipping or -dist), more micro-batches (about 5%
// per doubling), bf16 autocast (10%: it changes the numerics),
// activation checkpointing (recompute, about a third more compute), and,
// when cfg plans one rank of several (-dist with -ranks N, N > 1), a
// higher ZeRO stage (exact, like DDP: stages 1 and 2 about as cheap as
// DDP, stage 3 dearer, see zeroCost; never below cfg's stage). Only when
// none of those fits does it change the optimizer's state format, the
// approximate methods, in this order (and then, all of them again, with
// parameters stored in bf16, -weights bf16): 8-bit moments (adam →
// adam8bit, adamw → adamw8bit; within 1% of the f32 loss on the GPT
// reference, BENCHMARKS.md) and then adafactor (factored second moment,
// no first moment; within 3%), each again over the exact candidates. SGD
// is never swapped for another algorithm. Last of all it offloads state
// to host memory (-offload all, or activations where the optimizer
// cannot be offloaded, as under -dist): exact, but every step copies
// activations or gradients and parameters over and back. On a device
// with memory of its own a candidate whose host side (PeakBytes.HostTotal)
// exceeds the host budget (cfg.FitHost, or this machine's available
// memory less a margin: hostBudget) is skipped like one over budget; on
// the CPU the budget counts both (need). Candidates Config.Validate
// refuses are skipped. It says why when nothing fits, naming the host
// budget when that is what ruled candidates out.
func Fit(cfg Config, budget int64) (Choice, error) {
	return FitContext(context.Background(), cfg, budget)
}

// FitContext is Fit, stopped (with an error wrapping ctx's) when ctx is
// done.
func FitContext(ctx context.Context, cfg Config, budget int64) (Choice, error) {
	c, _, err := fitSearched(ctx, cfg, budget)
	return c, err
}

// fitSearched is FitContext with its search's counts (nil where it
// failed before searching).
func fitSearched(ctx context.Context, cfg Config, budget int64) (Choice, *fitSearch, error) {
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		return Choice{}, nil, err
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return Choice{}, nil, err
	}
	ds, err := openData(cfg)
	if err != nil {
		return Choice{}, nil, err
	}
	var exact, approx []*fitAxis
	for _, t := range techniques {
		switch {
		case t.fit == nil:
		case t.fit.tier == 0:
			exact = append(exact, t.fit)
		default:
			approx = append(approx, t.fit)
		}
	}
	slices.SortStableFunc(approx, func(a, b *fitAxis) int { return a.tier - b.tier })
	// The approximate combinations: a mixed-radix count, the lowest
	// tier fastest; each option is taken from the configuration with the
	// lower tiers' choices applied (offloading everything the rest
	// allows depends on them).
	radix := make([]int, len(approx))
	for i, a := range approx {
		radix[i] = len(a.options(cfg))
	}
	s := &fitSearch{
		budget: budget, host: hostBudget(cfg),
		best: Choice{Config: cfg, Peak: PeakBytes{Total: math.MaxInt64}},
	}
	idx := make([]int, len(approx))
	for {
		c, ok := cfg, true
		for i, a := range approx {
			opts := a.options(c)
			if idx[i] >= len(opts) {
				ok = false
				break
			}
			c = opts[idx[i]]
		}
		if ok {
			found, fits, err := fitWith(ctx, c, cfg, exact, ds, s)
			if err != nil || fits {
				return found, s, err
			}
		}
		i := 0
		for ; i < len(idx); i++ {
			if idx[i]++; idx[i] < radix[i] {
				break
			}
			idx[i] = 0
		}
		if i == len(idx) {
			break
		}
	}
	if s.overHost == 0 {
		// The message names the nearest miss (with some over the host's
		// budget only, the least of those instead).
		if err := s.settle(ctx, ds); err != nil {
			return Choice{}, s, err
		}
	}
	try := "a smaller model, -optim sgd or -freeze"
	if shardable(cfg) {
		// Every stage was tried: only more ranks shrink the shards.
		try += ", or more ranks (-ranks, mpirun -np)"
	} else {
		try += ", or data parallelism: -dist mpi -zero 1, 2 or 3 shard the model state over ranks (plan them with -ranks N)"
	}
	if s.overHost > 0 {
		// Some fitted the device: the host budget ruled them out.
		o := s.hostBest
		return Choice{}, s, fmt.Errorf("-fit %s: nothing fits %s of host memory (%s): %d configuration(s) fit the device but need more of the host; the least is %s (%s, device peak %s); try a larger -fit-host where the machine that trains has the memory, or a larger -fit or a shorter -context",
			memory.FormatBytes(budget), memory.FormatBytes(s.host), hostBudgetSource(cfg), s.overHost,
			memory.FormatBytes(o.Peak.HostTotal), o.Flags(cfg), memory.FormatBytes(need(o.Config, o.Peak)))
	}
	best := s.best
	return Choice{}, s, fmt.Errorf("-fit %s: nothing fits: the smallest predicted peak is %s (%s), of which parameters %s, optimizer state %s; try %s",
		memory.FormatBytes(budget), memory.FormatBytes(need(best.Config, best.Peak)), best.Flags(cfg),
		memory.FormatBytes(best.Peak.Parameter), memory.FormatBytes(best.Peak.OptimizerState), try)
}

// A fitSearch is what -fit's search keeps across the tiers: its budgets,
// the nearest misses, for the message when nothing fits, and the floors
// and deferred candidates of the optimizer's variants.
type fitSearch struct {
	budget int64 // the device's (on the CPU, device and host together: need)
	host   int64 // the host's beside it (hostBudget; 0: none)
	// best is the candidate with the smallest need over budget; hostBest
	// the one with the smallest host side of the overHost candidates that
	// fit budget but not host.
	best, hostBest Choice
	overHost       int
	// seq numbers the candidates in the order of the search; bestSeq is
	// best's (the first of the smallest need).
	seq, bestSeq int
	// floor holds, by optimKey, the largest lower bound (optimFloor) of
	// the need of every candidate alike but for its optimizer, from the
	// plans of those planned so far.
	floor map[string]int64
	// deferred are the candidates skipped, unplanned, for a floor over
	// the budget: they cannot fit, but one could be the nearest miss,
	// which settle finds among them when nothing fits.
	deferred []deferredFit
	// planned counts the plans made (settled those settle made), pruned
	// the candidates deferred (for tests).
	planned, settled, pruned int
}

// A deferredFit is a candidate fitWith skipped for its floor.
type deferredFit struct {
	c     Choice // unplanned
	floor int64
	seq   int
}

// fitPrune turns on deferring, unplanned, the candidates one of whose
// optimizer's variants was planned with a floor (optimFloor) over the
// budget; tests turn it off to compare.
var fitPrune = true

// optimKey is c with the settings the optimizer tier changes (its name,
// and the learning rate it sets for Adafactor) cleared, as text:
// candidates with equal keys differ only in the optimizer.
func optimKey(c Config) string {
	c.Optim.Name, c.Optim.LR = "", 0
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a Config is plain data
	}
	return string(b)
}

// optimFloor is a lower bound, from a plan p of c, of the need of every
// configuration that differs from c only in the optimizer (optimKey).
//
// Why it is one. The optimizer's own code (package optim, whatever the
// algorithm: its state, its update after backward or inside it,
// clipping, stochastic rounding; the meta device's update kernels
// allocate nothing) allocates only optimizer state and temporaries.
// Elsewhere the algorithm changes only the layout ZeRO gives the shards
// (8-bit Adam's blocks, Adafactor's whole tensors): gradients and
// temporaries at stages 1 and 2, parameters too at stage 3. Nothing in a
// plan is sized by the memory left (the meta device has no limit). So
// the bytes in the other categories, R (activations, data, the KV cache,
// other, and parameters below stage 3), are allocated and freed in the
// same order whatever the optimizer, interleaved differently with the
// optimizer's; each step's peaks are measured over the same stretch of
// that order, so every variant reaches the same peak of R, and its device
// peak (Total) at least that. A plan's categories are each their own
// peak, not their shares at the moment of the total's, so Total less the
// peaks of the categories left out of R is at most R at that moment,
// wherever it falls (during the optimizer's step too); Activation, Data
// and KVCache are each at most R's peak alone. On a device whose memory
// is the host's, need adds the host's peak: it holds an offloaded
// optimizer's state and temporaries, so only its activations (offloaded,
// by the same argument on the host's allocator) carry over.
func optimFloor(c Config, p PeakBytes) int64 {
	rest := p.Total - p.Gradient - p.OptimizerState - p.Temporary
	if c.Parallel.Zero >= 3 {
		rest -= p.Parameter
	}
	f := max(rest, p.Activation, p.Data, p.KVCache)
	if device.OnHost(c.Device.Name) {
		f += p.HostActivation
	}
	return f
}

// settle plans, when nothing fitted, the deferred candidates that could
// be the nearest miss, and takes one for it as the search without
// fitPrune would have: the first in the search's order of the smallest
// need. A deferred candidate's need is over the budget (at least its
// floor), so none fits nor counts as over the host's budget only.
func (s *fitSearch) settle(ctx context.Context, ds *dataset) error {
	for _, d := range s.deferred {
		bn := need(s.best.Config, s.best.Peak)
		if d.floor > bn || d.floor == bn && d.seq > s.bestSeq {
			continue // its need is not less, and it comes later
		}
		p, err := planWith(ctx, d.c.Config, ds)
		if err != nil {
			return err
		}
		s.planned++
		s.settled++
		d.c.Peak = p
		if n := need(d.c.Config, p); n < bn || n == bn && d.seq < s.bestSeq {
			s.best, s.bestSeq = d.c, d.seq
		}
	}
	s.deferred = nil
	return nil
}

// fits reports whether a candidate's plan p fits both budgets, noting
// the nearest misses.
func (s *fitSearch) fits(c Choice) bool {
	n := need(c.Config, c.Peak)
	switch {
	case n > s.budget:
		if n < need(s.best.Config, s.best.Peak) {
			s.best, s.bestSeq = c, s.seq
		}
		return false
	case s.host > 0 && c.Peak.HostTotal > s.host:
		if s.overHost == 0 || c.Peak.HostTotal < s.hostBest.Peak.HostTotal {
			s.hostBest = c
		}
		s.overHost++
		return false
	}
	return true
}

// fitWith plans the combinations of the exact axes' options of cfg in
// order of estimated cost (relative to orig), returning the first that
// fits s's budgets and keeping the nearest misses in s. Candidates
// Config.Validate refuses are skipped.
func fitWith(ctx context.Context, cfg, orig Config, exact []*fitAxis, ds *dataset, s *fitSearch) (Choice, bool, error) {
	// Every combination, the first axis varying slowest.
	cands := []Config{cfg}
	for _, a := range exact {
		var next []Config
		for _, c := range cands {
			next = append(next, a.options(c)...)
		}
		cands = next
	}
	var choices []Choice
	for _, c := range cands {
		if c.Validate() != nil {
			continue
		}
		cost := 1.0
		for _, a := range exact {
			cost *= a.cost(c, orig)
		}
		choices = append(choices, Choice{Config: c, Cost: cost})
	}
	sort.SliceStable(choices, func(i, j int) bool { return choices[i].Cost < choices[j].Cost })
	// The parameters and optimizer state a plan held after its steps,
	// by the configuration with the axes that keep them cleared: a lower
	// bound of the peak of every candidate alike but for those axes.
	held := map[string]int64{}
	if s.floor == nil {
		s.floor = map[string]int64{}
	}
	for _, c := range choices {
		s.seq++
		key := stateKey(c.Config, exact)
		h, had := held[key]
		if had && h > s.budget {
			continue
		}
		// Deferred, unplanned, where a variant of it with another
		// optimizer was planned with a floor over the budget: its need is
		// over the budget too, so it neither fits nor counts as over the
		// host's budget only, and settle plans it should nothing fit and
		// it could be the nearest miss. Only where held has its key:
		// planning it would tell held nothing new (it holds what the one
		// planned before it holds), so the search goes on as it would
		// have.
		vkey := optimKey(c.Config)
		if f, known := s.floor[vkey]; fitPrune && had && known && f > s.budget {
			s.pruned++
			s.deferred = append(s.deferred, deferredFit{c: c, floor: f, seq: s.seq})
			continue
		}
		p, h, err := planState(ctx, c.Config, ds)
		if err != nil {
			return Choice{}, false, err
		}
		s.planned++
		held[key] = h
		s.floor[vkey] = max(s.floor[vkey], optimFloor(c.Config, p))
		c.Peak = p
		if s.fits(c) {
			return c, true, nil
		}
	}
	return Choice{}, false, nil
}

// stateKey is c with the exact axes' settings that keep the model state
// cleared (fitAxis.keepsState), as text: configurations with equal keys
// hold the same parameters and optimizer state.
func stateKey(c Config, exact []*fitAxis) string {
	for _, a := range exact {
		if a.keepsState != nil {
			a.keepsState(&c)
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a Config is plain data
	}
	return string(b)
}

// need is what a plan needs of the budget: the device's peak, and on a
// device whose memory is the host's (the CPU) the host memory of
// -offload too, since both come out of the same RAM. (On a GPU the
// budget is the GPU's, and the host's part is reported beside it.)
func need(c Config, p PeakBytes) int64 {
	if p.Total == math.MaxInt64 {
		return p.Total
	}
	if device.OnHost(c.Device.Name) {
		return p.Total + p.HostTotal
	}
	return p.Total
}

// hostCapacity is the host memory this machine may give the process:
// its available memory less a margin (cpu.DefaultCapacity); 0 where the
// system does not say. Tests replace it.
var hostCapacity = cpu.DefaultCapacity

// hostBudget is the host memory a plan of c may use beside the device's
// (-offload's host side, PeakBytes.HostTotal): -fit-host, or else this
// machine's available memory less a margin (hostCapacity); 0 (none) on a
// device whose memory is the host's, where need counts both in the one
// budget, or where the system does not say.
func hostBudget(c Config) int64 {
	switch {
	case device.OnHost(c.Device.Name):
		return 0
	case c.FitHost > 0:
		return c.FitHost
	}
	return max(hostCapacity(), 0)
}

// hostBudgetSource says where hostBudget(c) came from.
func hostBudgetSource(c Config) string {
	if c.FitHost > 0 {
		return "-fit-host"
	}
	return "this machine's available memory less a margin; -fit-host sets it"
}
