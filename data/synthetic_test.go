package data

import (
	"slices"
	"strings"
	"testing"
)

func TestSpirals(t *testing.T) {
	ds, err := NewSpirals(SpiralsConfig{N: 5000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 5000 || ds.Dim() != 32 || ds.NumClasses() != 10 {
		t.Fatalf("defaults: %d examples of %d features in %d classes", ds.Len(), ds.Dim(), ds.NumClasses())
	}
	counts := make([]int, 10)
	var sum, sq float64
	for i := range ds.Len() {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		im := ex.(Image)
		counts[im.Label]++
		for _, v := range im.Pixels {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
	}
	for c, n := range counts {
		if n < 350 || n > 650 {
			t.Errorf("class %d has %d of 5000 examples", c, n)
		}
	}
	if v := sq / float64(5000*32); v < 0.3 || v > 3 {
		t.Errorf("mean square feature %v, want about 1", v)
	}
	again, _ := NewSpirals(SpiralsConfig{N: 5000, Seed: 1})
	other, _ := NewSpirals(SpiralsConfig{N: 5000, Seed: 2})
	a, _ := ds.Get(123)
	b, _ := again.Get(123)
	c, _ := other.Get(123)
	if !slices.Equal(a.(Image).Pixels, b.(Image).Pixels) || slices.Equal(a.(Image).Pixels, c.(Image).Pixels) {
		t.Error("example 123 does not follow the seed")
	}
	if _, err := NewSpirals(SpiralsConfig{Dim: 1}); err == nil {
		t.Error("one feature: no error")
	}
}

func TestSyntheticText(t *testing.T) {
	ds, err := NewSyntheticText(SyntheticTextConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 20000 || ds.Context() != 64 {
		t.Fatalf("defaults: %d windows of %d", ds.Len(), ds.Context())
	}
	var all strings.Builder
	for i := range 200 {
		ex, err := ds.Get(i)
		if err != nil {
			t.Fatal(err)
		}
		w := ex.(Window)
		text := ds.Text(i)
		if len(w.Input) != 64 || windowText(w) != text[:64] || w.Target[63] != int32(text[64]) {
			t.Fatalf("window %d does not match its text %q", i, text)
		}
		all.WriteString(text)
	}
	s := all.String()
	for _, want := range []string{"copy ", "+", "=", ". "} {
		if !strings.Contains(s, want) {
			t.Errorf("200 windows never contain %q", want)
		}
	}
	again, _ := NewSyntheticText(SyntheticTextConfig{Seed: 1})
	other, _ := NewSyntheticText(SyntheticTextConfig{Seed: 2})
	if again.Text(5) != ds.Text(5) || other.Text(5) == ds.Text(5) {
		t.Error("window 5 does not follow the seed")
	}
}
