package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Added tokens are found as the Rust tokenizers library finds them
// (added_vocabulary.rs): those with normalized false in the raw text, then,
// in each stretch between them once normalized, those with normalized true
// as their own normalized text. Each search takes the leftmost match, the
// longest of those starting there (Aho-Corasick's leftmost-longest), then
// goes on after it; a single_word token with a word character (\w) beside
// it is passed over, its text not searched again; lstrip and rstrip take
// the white space (\s) before and after the token with it, lstrip not back
// into the previous match.

// trie indexes the texts of added tokens by their bytes, so that finding
// the longest one at a position costs a step per byte of it (a search
// among at most 256 children), however many tokens there are (Gemma 3 has
// 6,415; a scan of them all at every position would dominate encoding).
// Nodes are in breadth-first order, so each node's children are
// consecutive and sorted by byte, and a node takes 16 bytes.
type trie struct {
	root  [256]int32 // the node of each first byte, or -1
	nodes []trieNode
}

type trieNode struct {
	label byte  // the byte that leads here
	token int32 // the token whose text ends here, or -1
	child int32 // the children are nodes[child : child+n]
	n     int32
}

// newTrie builds the trie of texts (none empty); a text given twice keeps
// its first index.
func newTrie(texts []string) *trie {
	order := make([]int32, len(texts))
	total := 0
	for i, t := range texts {
		order[i] = int32(i)
		total += len(t)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(texts[a], texts[b]) })
	tr := &trie{nodes: make([]trieNode, 0, total)} // at most a node a byte
	for i := range tr.root {
		tr.root[i] = -1
	}
	// The texts of node k are order[spans[k].lo:spans[k].hi]: those that
	// share its first depth bytes. Nodes are made in breadth-first order,
	// so walking them in order visits each after its parent.
	type span struct{ lo, hi, depth int32 }
	spans := make([]span, 0, total)
	// branch appends the children of the texts in order[lo:hi] at depth d
	// (each at least d+1 bytes long).
	branch := func(lo, hi, d int32) (first, n int32) {
		first = int32(len(tr.nodes))
		for lo < hi {
			b := texts[order[lo]][d]
			end := lo + 1
			for end < hi && texts[order[end]][d] == b {
				end++
			}
			tr.nodes = append(tr.nodes, trieNode{label: b, token: -1})
			spans = append(spans, span{lo, end, d + 1})
			lo = end
		}
		return first, int32(len(tr.nodes)) - first
	}
	first, n := branch(0, int32(len(order)), 0)
	for k := first; k < first+n; k++ {
		tr.root[tr.nodes[k].label] = k
	}
	for k := 0; k < len(tr.nodes); k++ { // len grows as children are added
		sp := spans[k]
		lo := sp.lo
		// Sorted, the texts that end here come first; of equal texts the
		// stable sort put the first given first.
		for lo < sp.hi && int32(len(texts[order[lo]])) == sp.depth {
			if tr.nodes[k].token < 0 {
				tr.nodes[k].token = order[lo]
			}
			lo++
		}
		tr.nodes[k].child, tr.nodes[k].n = branch(lo, sp.hi, sp.depth)
	}
	return tr
}

// longest returns the index of the longest text that s starts with and its
// length, or -1.
func (tr *trie) longest(s string) (int, int) {
	k := tr.root[s[0]]
	best, size := -1, 0
	for i := 1; k >= 0; i++ {
		nd := &tr.nodes[k]
		if nd.token >= 0 {
			best, size = int(nd.token), i
		}
		if i == len(s) || nd.n == 0 {
			break
		}
		k = tr.child(nd, s[i])
	}
	return best, size
}

// child returns the child of nd labelled b, or -1.
func (tr *trie) child(nd *trieNode, b byte) int32 {
	lo, hi := nd.child, nd.child+nd.n
	for hi-lo > 8 { // binary search down to a few, then look at each
		mid := int32(uint32(lo+hi) >> 1)
		if tr.nodes[mid].label < b {
			lo = mid + 1
		} else {
			hi = mid + 1 // b is at mid or before
		}
	}
	for ; lo < hi; lo++ {
		if tr.nodes[lo].label == b {
			return lo
		}
	}
	return -1
}

// matcher finds one set of added tokens (normalized or not) in text.
type matcher struct {
	tokens    []addedToken
	trie      *trie
	maxLen    int  // the longest token's text
	anyLstrip bool // some token strips the spaces before it
}

func newMatcher(tokens []addedToken, texts []string) *matcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &matcher{tokens: tokens, trie: newTrie(texts)}
	for i, a := range tokens {
		m.maxLen = max(m.maxLen, len(texts[i]))
		m.anyLstrip = m.anyLstrip || a.lstrip
	}
	return m
}

// match is where the next added token is, or where text is known to hold
// none.
type match struct {
	tok  *addedToken // nil: no token starts before stop
	i, j int         // the token's text is s[i:j]
	p, q int         // with the spaces it strips, s[p:q]
	stop int
	pass int // the end of the last match passed over (single_word), or 0
}

// find looks for the first token that counts in s from byte from on
// (earlier bytes are in a match passed over). prev is the rune before s,
// or -1 at the start of the text searched. Unless atEOF, a token is looked
// for only where it cannot run past the end of s, and a single_word token
// ending there (or before a rune cut short) waits for the rune after it.
func (m *matcher) find(s string, from int, prev rune, atEOF bool) match {
	lim := len(s)
	if !atEOF {
		lim = len(s) - m.maxLen + 1
	}
	pass := 0
	for i := from; i < lim; i++ {
		if m.trie.root[s[i]] < 0 {
			continue
		}
		k, n := m.trie.longest(s[i:])
		if k < 0 {
			continue
		}
		a, j := &m.tokens[k], i+n
		if a.singleWord {
			if !atEOF && trimPartial(s[j:]) == "" {
				return match{stop: i, pass: pass} // the rune after it decides
			}
			before := prev
			if i > 0 {
				before, _ = utf8.DecodeLastRuneInString(s[:i])
			}
			after, _ := utf8.DecodeRuneInString(s[j:])
			if isWordRune(before) || j < len(s) && isWordRune(after) {
				pass, i = j, j-1 // Aho-Corasick goes on after the match
				continue
			}
		}
		p, q := i, j
		if a.lstrip {
			p = len(strings.TrimRightFunc(s[:i], unicode.IsSpace))
		}
		if a.rstrip {
			q = len(s) - len(strings.TrimLeftFunc(s[j:], unicode.IsSpace))
		}
		return match{tok: a, i: i, j: j, p: p, q: q, pass: pass}
	}
	return match{stop: max(lim, from, pass), pass: pass}
}

// isWordRune reports whether r is in the Rust regex crate's Unicode \w:
// Alphabetic, marks, decimal digits, connector punctuation and the join
// controls. Other numbers (½, Ⅻ is Alphabetic) are not.
func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Other_Alphabetic, r) || r == 0x200c || r == 0x200d
}
