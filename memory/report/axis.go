package report

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/memfit/memfit/memory"
)

// byteTicks returns tick values from 0 to at least top, about n of them,
// spaced by 1, 2 or 5 times a power of ten of the binary unit (B, KiB, MiB,
// ...) that top is best written in, and that unit's size and name.
func byteTicks(top int64, n int) (ticks []int64, unit int64, name string) {
	unit, name = 1, "B"
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 10, "KiB"}, {1 << 20, "MiB"}, {1 << 30, "GiB"}, {1 << 40, "TiB"}} {
		if top >= u.size {
			unit, name = u.size, u.name
		}
	}
	step := niceStep(float64(top)/float64(unit), n)
	if unit == 1 {
		step = max(step, 1)
	}
	for i := 0; ; i++ {
		v := int64(math.Round(float64(i) * step * float64(unit)))
		ticks = append(ticks, v)
		if v >= top || i > 100 {
			break
		}
	}
	return ticks, unit, name
}

// niceStep is the smallest of 1, 2 and 5 times a power of ten that divides
// [0, span] into at most n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel writes v in unit with as few decimals as it needs: "0",
// "512 B", "2 MiB", "2.5 MiB".
func tickLabel(v, unit int64, name string) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(v)/float64(unit), 'f', -1, 64) + " " + name
}

// countTicks returns ticks from 0 to at most top, about n of them, spaced by
// 1, 2 or 5 times a power of ten.
func countTicks(top int, n int) []int {
	step := max(int(niceStep(float64(top), n)), 1)
	var out []int
	for v := 0; v <= top; v += step {
		out = append(out, v)
	}
	return out
}

// countLabel writes n as "950", "12k" or "1.5M".
func countLabel(n int) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 10_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// shortSite keeps the last two elements of a file:line site
// ("tensor/growth_test.go:42"), and names an unknown one.
func shortSite(site string) string {
	if site == "" {
		return "(site unknown)"
	}
	dir, file := filepath.Split(filepath.ToSlash(site))
	dir = strings.TrimSuffix(dir, "/")
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		dir = dir[i+1:]
	}
	if dir == "" {
		return file
	}
	return dir + "/" + file
}

// fit cuts s to n characters, keeping its end (where a site's file and line
// are).
func fit(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// categoryColors are the fills of the stacked areas.
var categoryColors = [memory.NumCategories]string{
	memory.Parameter:      "#4e79a7",
	memory.Gradient:       "#f28e2b",
	memory.OptimizerState: "#59a14f",
	memory.Data:           "#76b7b2",
	memory.KVCache:        "#ff9da7",
	memory.Activation:     "#e15759",
	memory.Temporary:      "#edc948",
	memory.Other:          "#b07aa1",
}

// stackOrder is the order of the stacked areas, bottom first: what lives
// across steps below what comes and goes within one.
var stackOrder = [memory.NumCategories]memory.Category{
	memory.Parameter, memory.Gradient, memory.OptimizerState, memory.Data,
	memory.KVCache, memory.Activation, memory.Temporary, memory.Other,
}
