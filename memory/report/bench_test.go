package report_test

import (
	"io"
	"testing"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

// BenchmarkHTMLReport renders a history of a million events.
func BenchmarkHTMLReport(b *testing.B) {
	a := memory.New(memory.NewCountingRaw(0, "meta"))
	a.EnableHistory(1 << 20)
	a.SetSiteFunc(func() string { return "model.go:1" })
	var live []*memory.Block
	for i := range 1 << 19 {
		a.SetStep(int64(i / 5000))
		blk, _ := a.Alloc(int64(512+(i*7919)%(64<<10)), memory.Category(i%int(memory.NumCategories)))
		live = append(live, blk)
		if len(live) > 200 {
			a.Free(live[0])
			live = live[1:]
		}
	}
	s := a.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if err := report.WriteSnapshot(io.Discard, report.HTML, s); err != nil {
			b.Fatal(err)
		}
	}
}
