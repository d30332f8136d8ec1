package train

import (
	"fmt"
	"strings"
)

// A run composes techniques. Each is one unit, declared in one file of
// this package (tech_*.go) and listed once in techniques below: its
// options (a typed part of Config), its flags and their help, the checks
// of its own options, the ways a run may use it (features) and which
// features of other techniques it refuses or needs (declared once, never
// as pairwise code: Validate and docs/techniques.md both read the
// declarations), its clause in the plan's first line, its place in
// -fit's search, and the part of a run it builds (build), whose hooks
// (hooks.go) the trainer calls at fixed points of building a run and of
// running a step. Adding a technique is a new tech_*.go file, a field for
// its options in Config's group, and one line in techniques.
type technique struct {
	name  string // how docs/techniques.md names it
	group string // its -h group (flags.go)
	doc   string // what it saves and what it costs, one line

	// flags binds its flags to its options in c, in the order -h lists
	// them.
	flags func(f *Flags, c *Config)
	// features are the ways a run may use it; each is a row and a column
	// of the matrix in docs/techniques.md.
	features []feature
	// refuses and needs are its rules against other techniques'
	// features (by name); each pair is declared by one of the two.
	refuses []rule
	needs   []rule
	// check validates its own options (naming the flag), against the
	// model's Kind where it matters; nil: nothing to check.
	check func(c *Config) error
	// describe is its clause in the plan's first line, "" to add none.
	describe func(c *Config) string
	// tried names its flags for an out-of-memory error's hint when the
	// run uses it, so that the hint suggests what has not been tried.
	tried func(c *Config) []string
	// fit is its place in -fit's search (fit.go); nil: -fit keeps it as
	// given.
	fit *fitAxis
	// build makes its part of a run on t: a value implementing some of
	// the hooks in hooks.go, or nil when the run does not use it.
	build func(t *Trainer) (any, error)
}

// A feature is one way a run uses a technique: "amp fp16", "offload
// optimizer".
type feature struct {
	name string
	// on reports whether run c uses it.
	on func(c *Config) bool
	// flag is how the error names the setting that turns it on:
	// "-accum 4", "-amp fp16".
	flag func(c *Config) string
	// alternative marks the values of one option (-amp fp16, -amp bf16):
	// a run takes at most one of a technique's alternatives.
	alternative bool
}

// A rule pairs the feature declaring it with another one (by name): the
// two refuse to compose, or the first needs the second. Why says which
// mechanism makes it so, and what to do instead.
type rule struct {
	feature string // the declaring technique's feature
	other   string // the other feature
	why     string
}

// techniques lists every technique in the order the trainer applies
// them: block runners wrap in this order (checkpointing innermost), the
// plan's clauses and the -fit line follow it, and -fit's exact axes
// multiply in it.
var techniques []*technique

// init lists the techniques: in a function, since some of them (-fit's
// choice of what offloading may move) check a configuration against all
// of them.
func init() {
	techniques = []*technique{
		accumulation,
		mixedPrecision,
		checkpointing,
		tiling,
		optimizerState,
		chunkedHead,
		packing,
		freezing,
		lowRank,
		stepInBackward,
		bf16Weights,
		quantizedBase,
		offloading,
		dataParallel,
	}
}

// features lists every technique's features, in technique order.
func features() []feature {
	var out []feature
	for _, t := range techniques {
		out = append(out, t.features...)
	}
	return out
}

// featureNamed returns the feature of that name; the declarations are
// checked by TestTechniqueDeclarations, so a missing name is a bug.
func featureNamed(name string) feature {
	for _, f := range features() {
		if f.name == name {
			return f
		}
	}
	panic("train: no technique declares the feature " + name)
}

// checkTechniques runs every technique's own check, then every rule.
func (c *Config) checkTechniques() error {
	for _, t := range techniques {
		if t.check == nil {
			continue
		}
		if err := t.check(c); err != nil {
			return err
		}
	}
	for _, t := range techniques {
		for _, r := range t.refuses {
			a, b := featureNamed(r.feature), featureNamed(r.other)
			if a.on(c) && b.on(c) {
				return fmt.Errorf("%s: conflicts with %s: %s", a.flag(c), b.flag(c), r.why)
			}
		}
		for _, r := range t.needs {
			a, b := featureNamed(r.feature), featureNamed(r.other)
			if a.on(c) && !b.on(c) {
				return fmt.Errorf("%s: needs %s: %s", a.flag(c), b.name, r.why)
			}
		}
	}
	return nil
}

// describePlan is the plan's first line after the model: each
// technique's clause, in technique order.
func describePlan(c *Config) string {
	var parts []string
	for _, t := range techniques {
		if t.describe == nil {
			continue
		}
		if s := t.describe(c); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

// flagOf renders one flag's setting for messages: "-name value", or
// "-name" for a boolean that is on.
func flagOf(name string, v any) string {
	if b, ok := v.(bool); ok && b {
		return "-" + name
	}
	return fmt.Sprintf("-%s %v", name, v)
}
