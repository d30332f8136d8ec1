package report_test

import (
	"bytes"
	"context"
	"flag"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/memory/report"
)

var screenshot = flag.String("screenshot", "", "copy the chromium screenshot of the GPT run's HTML report to this file (the README's docs/memory-timeline.png)")

// chromiumBin is the browser the rendering test drives: $MEMFIT_CHROMIUM or
// /usr/bin/chromium (Debian's chromium package). The test skips without it.
func chromiumBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("headless chromium test skipped in -short mode")
	}
	bin := os.Getenv("MEMFIT_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("headless chromium test skipped: %s not found (apt-get install chromium, or set MEMFIT_CHROMIUM)", bin)
	}
	return bin
}

// chromium runs a headless browser that stays off the network, with a
// fresh profile, and returns its standard output.
func chromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1200,800"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// colourful is the share of pixels in r whose channels differ by more than
// 40: the stacked areas, not the white background, grey grid or black text.
func colourful(img image.Image, r image.Rectangle) float64 {
	n, total := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			hi, lo := max(cr, cg, cb)>>8, min(cr, cg, cb)>>8
			if hi-lo > 40 {
				n++
			}
			total++
		}
	}
	return float64(n) / float64(total)
}

func TestHTMLReportRendersInChromium(t *testing.T) {
	bin := chromiumBin(t)
	a := trainGPT(t, 6)
	dir := t.TempDir()
	page := filepath.Join(dir, "memory.html")
	if err := report.WriteFile(page, a); err != nil {
		t.Fatal(err)
	}

	shot := filepath.Join(dir, "memory.png")
	chromium(t, bin, "--screenshot="+shot, "file://"+page)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 800 {
		t.Fatalf("screenshot is %v, want 1200x800", b)
	}
	// The plot area (SVG units 96..880 x 84..652, drawn at scale 1), less
	// the axes: the stacked areas must cover a good part of it; the
	// margin left of the y axis must be white.
	if f := colourful(img, image.Rect(100, 90, 875, 648)); f < 0.2 {
		t.Errorf("plot area is %.0f%% coloured, want the stacked areas to cover at least 20%%", 100*f)
	}
	if f := colourful(img, image.Rect(0, 90, 20, 648)); f > 0 {
		t.Errorf("left margin is %.0f%% coloured, want white", 100*f)
	}
	if *screenshot != "" {
		if err := os.WriteFile(*screenshot, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Hover: move the mouse over the plot and read the tooltip the page's
	// script fills in.
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	const hover = `<script>(function(){var r=document.getElementById('hit').getBoundingClientRect();` +
		`document.getElementById('hit').dispatchEvent(new MouseEvent('mousemove',{clientX:r.left+r.width*0.3,clientY:r.top+r.height*0.5,bubbles:true}))})();</script>`
	hovered := filepath.Join(dir, "hovered.html")
	if err := os.WriteFile(hovered, bytes.Replace(html, []byte("</body>"), []byte(hover+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := string(chromium(t, bin, "--dump-dom", "file://"+hovered))
	i := strings.Index(dom, `<div id="tip"`)
	if i < 0 {
		t.Fatalf("no tooltip in the page:\n%.2000s", dom)
	}
	tip := dom[i:]
	tip = tip[:strings.Index(tip, "</div>")]
	for _, want := range []string{"event ", "step ", "allocated <b>", "reserved", "gpt_test.go:"} {
		if !strings.Contains(tip, want) {
			t.Errorf("tooltip lacks %q: %s", want, tip)
		}
	}
	if strings.Contains(tip, "hidden") {
		t.Errorf("tooltip still hidden: %s", tip)
	}
	if os.Getenv("MEMFIT_KEEP_REPORT") != "" {
		chromium(t, bin, "--screenshot="+filepath.Join(os.Getenv("MEMFIT_KEEP_REPORT"), "hovered.png"), "file://"+hovered)
	}
}
