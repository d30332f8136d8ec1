package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
)

// checkpointing recomputes blocks in backward instead of keeping their
// activations (package checkpoint), by the policy -checkpoint names.
var checkpointing = &technique{
	name:  "activation checkpointing",
	group: "memory",
	doc:   "blocks' activations recomputed in backward instead of kept (every block, sqrt(n) segments, n segments, a byte budget, or nested: two levels, each block's input kept only while its segment is differentiated): about a third more compute, two thirds nested",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Memory.Checkpoint, "checkpoint", "activation checkpointing: off, every, sqrt, N segments, a budget such as 300MiB, or nested (sqrt(n) segments whose recompute checkpoints every block: about 2·sqrt(n) block inputs kept at once, for a second recompute)")
	},
	features: []feature{{
		name: "-checkpoint",
		on: func(c *Config) bool {
			s, err := ParseCheckpoint(c.Memory.Checkpoint)
			return err == nil && s.Kind != "off"
		},
		flag: func(c *Config) string { return flagOf("checkpoint", c.Memory.Checkpoint) },
	}},
	check: func(c *Config) error {
		_, err := ParseCheckpoint(c.Memory.Checkpoint)
		return err
	},
	describe: func(c *Config) string {
		if c.Generate.Tokens > 0 {
			return ""
		}
		return "checkpoint " + c.Memory.Checkpoint
	},
	tried: func(c *Config) []string {
		if c.Memory.Checkpoint != "" && c.Memory.Checkpoint != "off" {
			return []string{"-checkpoint"}
		}
		return nil
	},
	fit: &fitAxis{
		// Recomputing costs about a third more compute; on models where
		// it pays (models.Kind.Recompute).
		options: func(c Config) []Config {
			out := []Config{c}
			k, _ := c.kind()
			if !k.Recompute {
				return out
			}
			switch c.Memory.Checkpoint {
			case "off":
				for _, p := range []string{"sqrt", "every", "nested"} {
					c.Memory.Checkpoint = p
					out = append(out, c)
				}
			case "every", "sqrt":
				// Where the kept block inputs are what does not fit
				// (a context of a million tokens), two levels keep
				// about 2·√n of them rather than n.
				c.Memory.Checkpoint = "nested"
				out = append(out, c)
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			return recomputeCost(c.Memory.Checkpoint) / recomputeCost(orig.Memory.Checkpoint)
		},
		keepsState: func(c *Config) { c.Memory.Checkpoint = "" }, // recomputing changes activations only
		show:       []string{"checkpoint"},
	},
	build: func(t *Trainer) (any, error) {
		spec, _ := ParseCheckpoint(t.Config.Memory.Checkpoint)
		var p checkpoint.Policy
		switch spec.Kind {
		case "every":
			p = checkpoint.Every
		case "sqrt":
			p = checkpoint.Sqrt
		case "segments":
			p = checkpoint.Segments(spec.Segments)
		case "budget":
			p = checkpoint.Budget(spec.Budget)
		case "nested":
			p = checkpoint.Nested(0)
		default:
			p = checkpoint.Off
		}
		return checkpointPart{p}, nil
	},
}

// checkpointPart runs the blocks through the policy's runner, the
// innermost of the run's runners.
type checkpointPart struct{ policy checkpoint.Policy }

func (p checkpointPart) wrapRunner(t *Trainer, _ nn.BlockRunner) nn.BlockRunner {
	return p.policy.Runner()
}

// CheckpointSpec is a parsed -checkpoint value.
type CheckpointSpec struct {
	Kind     string // off, every, sqrt, nested, segments or budget
	Segments int
	Budget   int64
}

// recomputeCost is a step's compute under a -checkpoint value, relative
// to keeping every activation: a recomputed forward is about a third of
// a step, and nested checkpoints recompute most blocks twice.
func recomputeCost(checkpoint string) float64 {
	switch s, _ := ParseCheckpoint(checkpoint); s.Kind {
	case "off":
		return 1
	case "nested":
		return 1.67
	}
	return 1.33
}

// ParseCheckpoint reads off, every, sqrt, nested, a segment count or a
// byte budget (a size with a unit, e.g. 300MiB).
func ParseCheckpoint(s string) (CheckpointSpec, error) {
	switch strings.ToLower(s) {
	case "", "off":
		return CheckpointSpec{Kind: "off"}, nil
	case "every":
		return CheckpointSpec{Kind: "every"}, nil
	case "sqrt":
		return CheckpointSpec{Kind: "sqrt"}, nil
	case "nested":
		return CheckpointSpec{Kind: "nested"}, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 {
			return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want at least 1 segment", s)
		}
		return CheckpointSpec{Kind: "segments", Segments: n}, nil
	}
	b, err := memory.ParseBytes(s)
	if err != nil || b <= 0 {
		return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want off, every, sqrt, nested, a segment count or a memory budget such as 300MiB", s)
	}
	return CheckpointSpec{Kind: "budget", Budget: b}, nil
}
