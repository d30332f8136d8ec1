package memory

import (
	"fmt"
	"slices"
	"strings"
)

// Category says what a block holds. Requested bytes are accounted per
// category so that reports and OOM messages can say where memory went.
type Category uint8

// The categories. NumCategories is their count and stays last.
const (
	Other Category = iota
	Parameter
	Gradient
	OptimizerState
	Activation
	Temporary
	Data
	// KVCache is the keys and values a model keeps of the tokens it has
	// seen while it generates.
	KVCache
	NumCategories
)

var categoryNames = [NumCategories]string{
	Other:          "other",
	Parameter:      "parameter",
	Gradient:       "gradient",
	OptimizerState: "optimizer_state",
	Activation:     "activation",
	Temporary:      "temporary",
	Data:           "data",
	KVCache:        "kv_cache",
}

// String returns the category's name: "other", "parameter", "gradient",
// "optimizer_state", "activation", "temporary", "data" or "kv_cache".
func (c Category) String() string {
	if c < NumCategories {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", uint8(c))
}

// ParseCategory maps a name written by Category.String back to a Category.
func ParseCategory(s string) (Category, error) {
	for c := range NumCategories {
		if categoryNames[c] == s {
			return c, nil
		}
	}
	return Other, fmt.Errorf("memory: unknown category %q (want other, parameter, gradient, optimizer_state, activation, temporary, data or kv_cache)", s)
}

// A suggestion is one option an out-of-memory hint names, keyed by its
// flag so that a hint can leave out what was already tried.
type suggestion struct{ flag, text string }

var hints = [NumCategories][]suggestion{
	Parameter:      {{"", "a smaller model"}, {"-freeze", "-freeze <modules>"}},
	Gradient:       {{"-freeze", "-freeze <modules>"}, {"-amp", "-amp bf16"}},
	OptimizerState: {{"-optim", "-optim sgd"}, {"-freeze", "-freeze <modules>"}, {"-offload optimizer", "-offload optimizer"}},
	Activation:     {{"-checkpoint", "-checkpoint sqrt"}, {"-amp", "-amp bf16"}, {"-accum", "-accum 4"}, {"-batch", "a smaller -batch"}, {"-offload activations", "-offload activations"}, {"-tile", "-tile 2048"}},
	Temporary:      {{"-accum", "-accum 4"}, {"-batch", "a smaller -batch"}, {"-tile", "-tile 2048"}},
	Data:           {{"-prefetch", "lower -prefetch"}, {"-batch", "a smaller -batch"}},
	KVCache:        {{"", "fewer tokens to -generate, or a shorter -prompt"}},
}

// Hint names the memfit options that would cut the memory held by category
// c; it is "" for Other.
func Hint(c Category) string { return hint(c, nil) }

// hint is Hint without the suggestions whose flag is in tried, written as
// "a, b or c".
func hint(c Category, tried []string) string {
	if c >= NumCategories {
		return ""
	}
	var parts []string
	for _, s := range hints[c] {
		if s.flag == "" || !slices.Contains(tried, s.flag) {
			parts = append(parts, s.text)
		}
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}
