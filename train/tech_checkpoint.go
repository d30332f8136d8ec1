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
	doc:   "blocks' activations recomputed in backward instead of kept (every block, sqrt(n) segments, n segments or a byte budget): about a third more compute",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Memory.Checkpoint, "checkpoint", "activation checkpointing: off, every, sqrt, N segments or a budget such as 300MiB")
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
			if k, _ := c.kind(); c.Memory.Checkpoint == "off" && k.Recompute {
				for _, p := range []string{"sqrt", "every"} {
					c.Memory.Checkpoint = p
					out = append(out, c)
				}
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			if c.Memory.Checkpoint != orig.Memory.Checkpoint {
				return 1.33
			}
			return 1
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
	Kind     string // off, every, sqrt, segments or budget
	Segments int
	Budget   int64
}

// ParseCheckpoint reads off, every, sqrt, a segment count or a byte budget
// (a size with a unit, e.g. 300MiB).
func ParseCheckpoint(s string) (CheckpointSpec, error) {
	switch strings.ToLower(s) {
	case "", "off":
		return CheckpointSpec{Kind: "off"}, nil
	case "every":
		return CheckpointSpec{Kind: "every"}, nil
	case "sqrt":
		return CheckpointSpec{Kind: "sqrt"}, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 {
			return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want at least 1 segment", s)
		}
		return CheckpointSpec{Kind: "segments", Segments: n}, nil
	}
	b, err := memory.ParseBytes(s)
	if err != nil || b <= 0 {
		return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want off, every, sqrt, a segment count or a memory budget such as 300MiB", s)
	}
	return CheckpointSpec{Kind: "budget", Budget: b}, nil
}
