package memory

import "fmt"

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
}

// String returns the category's name: "other", "parameter", "gradient",
// "optimizer_state", "activation", "temporary" or "data".
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
	return Other, fmt.Errorf("memory: unknown category %q (want other, parameter, gradient, optimizer_state, activation, temporary or data)", s)
}

var hints = [NumCategories]string{
	Parameter:      "a smaller model or -freeze <modules>",
	Gradient:       "-freeze <modules>, -amp bf16",
	OptimizerState: "-optim sgd, -freeze <modules>",
	Activation:     "-checkpoint sqrt, -amp bf16, -accum 4 or a smaller -batch",
	Temporary:      "-accum 4 or a smaller -batch",
	Data:           "lower -prefetch or a smaller -batch",
}

// Hint names the memfit options that would cut the memory held by category
// c; it is "" for Other.
func Hint(c Category) string {
	if c < NumCategories {
		return hints[c]
	}
	return ""
}
