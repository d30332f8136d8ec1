package tokenizer

import (
	"container/heap"
	"sync"
)

// merge is what a pair of adjacent tokens becomes: the merged token and
// the merge's rank (lower merges first).
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe applies merges to words (pre-tokens) given as their initial token
// ids, as Hugging Face's BPE model does: repeatedly the lowest-ranked
// adjacent pair that has a merge, the leftmost among equals.
type bpe struct {
	merges map[uint64]merge
}

// symbol is one token of a word being merged, in a linked list.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	gone       bool
}

// candidate is a pair that may merge: the left symbol's position and the
// merge it would make.
type candidate struct {
	pos  int32
	rank int32
	id   int32
}

type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	if c[i].rank != c[j].rank {
		return c[i].rank < c[j].rank
	}
	return c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// shortWord is the length up to which a plain rescan beats the heap.
const shortWord = 24

// apply merges ids in place and returns the merged ids.
func (b *bpe) apply(ids []int32) []int32 {
	if len(ids) < 2 {
		return ids
	}
	if len(ids) <= shortWord {
		return b.applyShort(ids)
	}
	return b.applyHeap(ids)
}

// applyShort rescans the pairs after every merge: quadratic, and faster
// than a heap for the short words that make up most text.
func (b *bpe) applyShort(ids []int32) []int32 {
	for len(ids) > 1 {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(ids); i++ {
			m, ok := b.merges[pairKey(ids[i], ids[i+1])]
			if ok && (at < 0 || m.rank < best.rank) {
				best, at = m, i
			}
		}
		if at < 0 {
			break
		}
		ids[at] = best.id
		ids = append(ids[:at+1], ids[at+2:]...)
	}
	return ids
}

// applyHeap keeps the candidate pairs in a priority queue: O(n log n) for
// long words (runs of spaces or symbols, text without pre-tokenizer).
func (b *bpe) applyHeap(ids []int32) []int32 {
	syms := make([]symbol, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	q := make(candidates, 0, len(ids))
	for i := 0; i+1 < len(ids); i++ {
		if m, ok := b.merges[pairKey(ids[i], ids[i+1])]; ok {
			q = append(q, candidate{pos: int32(i), rank: m.rank, id: m.id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		s := &syms[c.pos]
		if s.gone || s.next < 0 {
			continue
		}
		// The pair may have changed since c was pushed; it still stands
		// only if it still merges into the same token.
		if m, ok := b.merges[pairKey(s.id, syms[s.next].id)]; !ok || m.id != c.id || m.rank != c.rank {
			continue
		}
		right := &syms[s.next]
		s.id = c.id
		right.gone = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := b.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				heap.Push(&q, candidate{pos: s.prev, rank: m.rank, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := b.merges[pairKey(s.id, syms[s.next].id)]; ok {
				heap.Push(&q, candidate{pos: c.pos, rank: m.rank, id: m.id})
			}
		}
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// wordCache remembers the tokens of words seen before. It is cleared when
// full rather than evicting one by one: text reuses a small set of words,
// and clearing keeps memory bounded on text that does not.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const cacheWords = 1 << 16

func (c *wordCache) get(w string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[w]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheWords {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[w] = ids
	c.mu.Unlock()
}
