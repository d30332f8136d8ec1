package hf

import (
	"fmt"
	"math"
)

// Bounds on config.json's values. They are far above every released model
// (the largest have under 200 layers, widths under 30000, MLP widths under
// 60000, vocabularies under 300000), and low enough that a model's
// parameter count, and its size in bytes in any dtype, is exact in an
// int64 whatever the config says: a hostile config is refused by
// arithmetic, before anything is built.
const (
	MaxLayers    = 1 << 14 // n_layer, num_hidden_layers
	MaxWidth     = 1 << 18 // n_embd, hidden_size
	MaxMLPWidth  = 1 << 20 // intermediate_size
	MaxHeads     = 1 << 14 // n_head, num_attention_heads, num_key_value_heads
	MaxVocab     = 1 << 24 // vocab_size
	MaxPositions = 1 << 24 // n_positions, max_position_embeddings
)

// bound is a config.json key's integer value and its range [lo, hi], with
// what the upper bound is.
type bound struct {
	key    string
	v      int
	lo, hi int
	what   string
}

// checkBounds returns an error naming the file and the first key out of
// its range.
func checkBounds(path string, bounds ...bound) error {
	for _, b := range bounds {
		switch {
		case b.v < b.lo:
			return fmt.Errorf("hf: %s: %s %d: want at least %d", path, b.key, b.v, b.lo)
		case b.v > b.hi:
			return fmt.Errorf("hf: %s: %s %d: over %d, %s", path, b.key, b.v, b.hi, b.what)
		}
	}
	return nil
}

// checkPositive returns an error naming the file and the first key whose
// value is not a finite number above zero (below below, if below > 0).
func checkPositive(path string, keys []string, values []float64, below float64) error {
	for i, v := range values {
		if !(v > 0) || math.IsInf(v, 0) || below > 0 && v >= below {
			want := "a finite number above 0"
			if below > 0 {
				want = fmt.Sprintf("a number above 0 and below %g", below)
			}
			return fmt.Errorf("hf: %s: %s %g: want %s", path, keys[i], v, want)
		}
	}
	return nil
}

// shapeKeys name, in a family's config.json, its layers, width, heads,
// positions and vocabulary.
type shapeKeys [5]string

// checkShape bounds the values both families have (in shapeKeys' order)
// and checks that the heads divide the width.
func checkShape(path string, keys shapeKeys, v [5]int) error {
	layers, width, heads := v[0], v[1], v[2]
	err := checkBounds(path,
		bound{keys[0], layers, 1, MaxLayers, "the bound on layers"},
		bound{keys[1], width, 1, MaxWidth, "the bound on widths"},
		bound{keys[2], heads, 1, min(width, MaxHeads), "more heads than " + keys[1] + " or the bound on heads"},
		bound{keys[3], v[3], 1, MaxPositions, "the bound on positions"},
		bound{keys[4], v[4], 1, MaxVocab, "the bound on vocabularies"})
	if err != nil {
		return err
	}
	if width%heads != 0 {
		return fmt.Errorf("hf: %s: %s %d does not divide %s %d", path, keys[2], heads, keys[1], width)
	}
	return nil
}

// check bounds a GPT-2 config (path names config.json, or says the
// shape was inferred) and checks that its heads divide its width.
func (c GPT2Config) check(path string) error {
	return checkShape(path, shapeKeys{"n_layer", "n_embd", "n_head", "n_positions", "vocab_size"},
		[5]int{c.Layers, c.Dim, c.Heads, c.Positions, c.Vocab})
}

// Params is the parameter count of the models.GPT c describes (its head
// tied to the token embedding, as GPT-2's): exact, computed from the
// config alone, so that a caller can size the model (Params times the
// parameters' dtype size) and refuse it before anything is built. c must
// be one ReadGPT2Config returned (bounded: no overflow).
func (c GPT2Config) Params() int64 {
	d, l := int64(c.Dim), int64(c.Layers)
	// Per block: two LayerNorms (2d each), qkv (d×3d + 3d), the
	// attention's projection (d×d + d), the MLP (d×4d + 4d, 4d×d + d).
	block := 12*d*d + 13*d
	return int64(c.Vocab)*d + int64(c.Positions)*d + l*block + 2*d
}
