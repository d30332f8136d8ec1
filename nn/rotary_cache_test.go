package nn

import (
	"slices"
	"testing"
)

// TestRotaryTablesCached asks for the tables of three tiles of rows in
// turn, as a tiled model's blocks do: each tile's are computed once and
// then served from the cache, the same values as computed afresh.
func TestRotaryTablesCached(t *testing.T) {
	p, err := NewRotary(RotaryConfig{HeadDim: 8, Theta: 10000})
	if err != nil {
		t.Fatal(err)
	}
	tile := func(start, n int) []int32 {
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(start + i)
		}
		return pos
	}
	tiles := [][]int32{tile(0, 5), tile(5, 5), tile(10, 3)}
	before := tablesComputed
	for range 4 { // blocks
		for _, pos := range tiles {
			cos, sin := p.TablesAt(pos)
			wc, ws := p.compute(len(pos), func(i int) int { return int(pos[i]) })
			if !slices.Equal(cos, wc) || !slices.Equal(sin, ws) {
				t.Fatalf("tables of positions %v differ from computed ones", pos)
			}
		}
	}
	if got := tablesComputed - before; got != len(tiles) {
		t.Errorf("computed %d sets of tables for %d tiles asked for 4 times each, want %d", got, len(tiles), len(tiles))
	}
	// Other frequencies never share a set.
	q, err := NewRotary(RotaryConfig{HeadDim: 8, Theta: 500000})
	if err != nil {
		t.Fatal(err)
	}
	before = tablesComputed
	q.TablesAt(tiles[0])
	if tablesComputed-before != 1 {
		t.Errorf("a rotary of other frequencies was served another's tables")
	}
	// A set over the cache's bound is kept alone.
	big := tile(0, tableCacheBytes/(16*8)+1)
	p.TablesAt(big)
	tableCache.Lock()
	n, bytes := len(tableCache.entries), tableCache.bytes
	tableCache.Unlock()
	if n != 1 || bytes <= tableCacheBytes {
		t.Errorf("after a set of %d rows over the bound: %d sets of %d bytes, want that one alone", len(big), n, bytes)
	}
}
