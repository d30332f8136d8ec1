package train

import (
	"fmt"

	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tile"
)

// tiling runs the token-wise work of each block (its norms, projections,
// rotary embeddings, MLP, LoRA paths and residual sums) over tiles of
// -tile tokens, forward and, recomputed, in backward (package tile), so
// that what grows with the context inside a block is what attention needs
// (its queries, keys, values and output): the [tokens, hidden] products of
// the MLP never exist for every token. Exact: the loss and every gradient
// are the untiled run's bit for bit on the CPU. It costs the token-wise
// forward once more per step.
var tiling = &technique{
	name:  "sequence tiling",
	group: "memory",
	doc:   "each block's norms, projections, MLP and LoRA paths over tiles of -tile tokens, recomputed in backward: what grows with the context inside a block is attention's queries, keys, values and output; exact, about a quarter more compute",
	flags: func(f *Flags, c *Config) {
		f.intVar(&c.Memory.Tile, "tile", fmt.Sprintf("run each block's token-wise work (norms, projections, MLP, LoRA paths) over tiles of this many `tokens`, a multiple of %d of at least %d, recomputed in backward (0: off)", tile.Align, tile.MinRows))
	},
	features: []feature{{
		name: "-tile",
		on:   func(c *Config) bool { return c.Memory.Tile > 0 },
		flag: func(c *Config) string { return flagOf("tile", c.Memory.Tile) },
	}},
	check: func(c *Config) error {
		n := c.Memory.Tile
		if n == 0 {
			return nil
		}
		if n < 0 {
			return bad("tile", n, "want a tile of tokens (0: off)")
		}
		if rows := int64(c.Optim.Batch) * int64(c.Model.Context); c.Model.Context > 0 && c.Optim.Batch > 0 && int64(n) > rows {
			return bad("tile", n, fmt.Sprintf("more tokens than a step has (-batch %d × -context %d = %d): a tile cuts a step's tokens", c.Optim.Batch, c.Model.Context, rows))
		}
		if _, err := tile.New(n); err != nil {
			return bad("tile", n, fmt.Sprintf("want a multiple of %d of at least %d tokens: tiles start on the products' blocks of summed tokens and span more than one, so that the weights' gradients are the untiled ones bit for bit", tile.Align, tile.MinRows))
		}
		// Masks are numbered by element over the whole sequence, which a
		// tile does not know.
		switch k, _ := c.kind(); {
		case !k.Tokens:
			return bad("tile", n, fmt.Sprintf("-model %s takes no token sequences to tile", c.Model.Name))
		case c.Model.Dropout > 0:
			return bad("tile", n, fmt.Sprintf("conflicts with -dropout %v: dropout masks inside a block's token-wise work are numbered over the whole sequence (use -dropout 0)", c.Model.Dropout))
		case c.Memory.LoRA.Dropout > 0:
			return bad("tile", n, fmt.Sprintf("conflicts with -lora-dropout %v: the adapters' masks are numbered over the whole sequence (use -lora-dropout 0)", c.Memory.LoRA.Dropout))
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Memory.Tile == 0 || c.Generate.Tokens > 0 {
			return ""
		}
		return fmt.Sprintf("tiles of %d tokens", c.Memory.Tile)
	},
	// An out-of-memory hint suggests -tile only where it could help: a
	// run that tiles already, or one that cannot (no token sequences,
	// dropout, a context no longer than one tile), counts as having
	// tried it.
	tried: func(c *Config) []string {
		k, _ := c.kind()
		if c.Memory.Tile > 0 || !k.Tokens || c.Model.Context <= tile.MinRows || c.Model.Dropout > 0 || c.Memory.LoRA.Dropout > 0 {
			return []string{"-tile"}
		}
		return nil
	},
	fit: &fitAxis{
		// Exact; the token-wise forward runs once more: about a quarter
		// more compute where the products dominate. The smallest tile
		// takes the most out of the peak for about the same time.
		options: func(c Config) []Config {
			out := []Config{c}
			if k, _ := c.kind(); c.Memory.Tile == 0 && k.Tokens {
				c.Memory.Tile = tile.MinRows
				out = append(out, c)
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			if c.Memory.Tile != orig.Memory.Tile {
				return 1.25
			}
			return 1
		},
		keepsState: func(c *Config) { c.Memory.Tile = 0 }, // tiles change activations and temporaries only
	},
	build: func(t *Trainer) (any, error) {
		if t.Config.Memory.Tile == 0 {
			return nil, nil
		}
		run, err := tile.New(t.Config.Memory.Tile)
		if err != nil {
			return nil, err
		}
		return &tilePart{run}, nil
	},
}

// tilePart gives the model's blocks the tile runner.
type tilePart struct{ run *tile.Runner }

// adaptModel hands the blocks the runner (before adapters are attached:
// the runner reads the layers at each forward).
func (p *tilePart) adaptModel(t *Trainer) error {
	m, ok := t.Model.(nn.TokenTiled)
	if !ok {
		return fmt.Errorf("-tile %d: -model %s has no token-wise blocks to tile", p.run.Rows(), t.Config.Model.Name)
	}
	if err := m.SetTokenRunner(p.run); err != nil {
		return fmt.Errorf("-tile %d: %v", p.run.Rows(), err)
	}
	return nil
}
