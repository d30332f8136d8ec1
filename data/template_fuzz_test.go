package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzChatTemplate runs any template source over a small conversation
// (its text fuzzed too): compiled, rendered and its answers found, it
// must end with a rendering or an error within its limits, never a
// panic (which the engine would report as an internal error), a hang or
// more output than its limit. Seeds: the real templates and the hostile
// ones that fit.
func FuzzChatTemplate(f *testing.F) {
	for _, fx := range loadChatFixtures(f) {
		f.Add(fx.Template, "hi <think>x</think> there", true)
	}
	jinjas, _ := filepath.Glob(filepath.Join("testdata", "chat", "templates", "*.jinja"))
	for _, p := range jinjas {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "a\nb", false)
	}
	for _, c := range hostileTemplates {
		if len(c.src) < 4096 {
			f.Add(c.src, "x", false)
		}
	}
	f.Add("{{ messages[0].content * 3 }}{% for m in messages %}{{ loop.index }}{% generation %}{{ m.content|trim }}{% endgeneration %}{% endfor %}", " y ", true)
	lim := tplLimits{Steps: 20000, Bytes: 1 << 20, Output: 64 << 10}
	f.Fuzz(func(t *testing.T, src, content string, agp bool) {
		start := time.Now()
		ct, err := NewChatTemplate(src, "<s>", "</s>")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "chat template: ") || strings.Contains(err.Error(), "internal error") {
				t.Fatalf("compile error %q", err)
			}
			return
		}
		ct.Name = "fuzz/tokenizer_config.json"
		ct.limits = func(int64) tplLimits { return lim }
		msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: content}, {Role: "assistant", Content: content + "!"}}
		for _, tmpl := range []*tplTemplate{ct.tmpl, ct.gen} {
			if tmpl == nil {
				continue
			}
			vals, err := messageValues(msgs)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ct.render(tmpl, vals, agp)
			switch {
			case err != nil && (!strings.Contains(err.Error(), "fuzz/tokenizer_config.json: chat_template") || strings.Contains(err.Error(), "internal error")):
				t.Fatalf("error %q", err)
			case int64(len(out)) > lim.Output:
				t.Fatalf("rendered %d bytes, over the limit of %d", len(out), lim.Output)
			}
		}
		if _, _, err := chatSpans(ct, msgs, true); err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("answers: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}
