package freeze

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// compile turns a path pattern into an anchored regular expression.
func compile(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString("[^.]")
		case '[':
			end := strings.IndexByte(pattern[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("pattern %q: '[' without ']'", pattern)
			}
			lo, hi, ok := strings.Cut(pattern[i+1:i+end], "-")
			a, errA := strconv.Atoi(lo)
			z, errZ := strconv.Atoi(hi)
			if !ok || errA != nil || errZ != nil || a > z || a < 0 {
				return nil, fmt.Errorf("pattern %q: range %q is not [low-high]", pattern, pattern[i:i+end+1])
			}
			var alts []string
			for n := a; n <= z; n++ {
				alts = append(alts, strconv.Itoa(n))
			}
			b.WriteString("(?:" + strings.Join(alts, "|") + ")")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// Match returns the paths matched by any pattern, in the order of paths.
// A pattern that matches nothing is an error listing the closest paths.
func Match(paths []string, patterns ...string) ([]string, error) {
	out, err := Select("parameter", paths, patterns...)
	if err != nil {
		return nil, fmt.Errorf("freeze: %w", err)
	}
	return out, nil
}

// Select is Match over paths of something other than parameters (the
// paths of a model's Linear layers, say), which noun names in its errors;
// they carry no package prefix, for the caller to add its own.
func Select(noun string, paths []string, patterns ...string) ([]string, error) {
	hit := make([]bool, len(paths))
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		re, err := compile(p)
		if err != nil {
			return nil, err
		}
		n := 0
		for i, path := range paths {
			if re.MatchString(path) {
				hit[i] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("pattern %q matches no %s; closest: %s", p, noun, strings.Join(closest(p, paths, 3), ", "))
		}
	}
	var out []string
	for i, path := range paths {
		if hit[i] {
			out = append(out, path)
		}
	}
	return out, nil
}

// closest returns the k paths nearest to pattern: by edit distance between
// the pattern's literal text and the path's prefix of that length (a
// pattern usually names a prefix), then by distance to the whole path.
func closest(pattern string, paths []string, k int) []string {
	type cand struct {
		path          string
		prefix, whole int
	}
	lit := strings.NewReplacer("*", "", "?", "").Replace(pattern)
	cs := make([]cand, len(paths))
	for i, p := range paths {
		cs[i] = cand{p, editDistance(lit, p[:min(len(p), len(lit))]), editDistance(lit, p)}
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].prefix != cs[j].prefix {
			return cs[i].prefix < cs[j].prefix
		}
		return cs[i].whole < cs[j].whole
	})
	var out []string
	for i := 0; i < len(cs) && i < k; i++ {
		out = append(out, cs[i].path)
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
