package tensor

import (
	"slices"
	"testing"
)

// Batches without Segments share one array of window starts per shape,
// equal to the starts made afresh, and the cache keeps only a few shapes.
func TestPlainWindowStartsShared(t *testing.T) {
	var c windowCache
	first := c.starts(2, 9, 4)
	if !slices.Equal(first, windowStarts(nil, 2, 9, 4)) {
		t.Fatalf("cached starts %v, want %v", first, windowStarts(nil, 2, 9, 4))
	}
	if again := c.starts(2, 9, 4); &again[0] != &first[0] {
		t.Error("a second call for the same shape made a new array")
	}
	for w := 1; w <= windowCacheSize; w++ {
		c.starts(1, 8, w)
	}
	if len(c.entries) != windowCacheSize {
		t.Errorf("the cache holds %d shapes, want at most %d", len(c.entries), windowCacheSize)
	}
	if again := c.starts(2, 9, 4); &again[0] == &first[0] {
		t.Error("the least recently used shape was kept past the cache's size")
	}
}
