package data

import "testing"

func TestPermutationIsBijection(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 64, 100, 1000, 4097} {
		for seed := range uint64(3) {
			p := newPermutation(n, seed)
			seen := make([]bool, n)
			fixed := 0
			for i := range n {
				j := p.at(i)
				if j < 0 || j >= n || seen[j] {
					t.Fatalf("n=%d seed=%d: at(%d) = %d repeats or leaves [0, n)", n, seed, i, j)
				}
				seen[j] = true
				if i == j {
					fixed++
				}
			}
			if n >= 100 && fixed > n/10 {
				t.Errorf("n=%d seed=%d: %d fixed points: not shuffled", n, seed, fixed)
			}
		}
	}
}

func TestPermutationDependsOnSeed(t *testing.T) {
	a, b := newPermutation(1000, 1), newPermutation(1000, 2)
	same := 0
	for i := range 1000 {
		if a.at(i) == b.at(i) {
			same++
		}
	}
	if same > 50 {
		t.Errorf("seeds 1 and 2 agree on %d of 1000 places", same)
	}
}
