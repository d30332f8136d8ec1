package data

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestTemplateBudgetOfRealTemplates: the real templates (the fixtures'),
// over their conversations and over a long one of 400 turns, stay far
// within the default limits: under an eighth of the steps and of the
// bytes, and a quarter of the output, each (and, over the conversation's
// size, under 1 step and 4 bytes of work a byte, 100 steps a message,
// which the limits' rates exceed 16 times and more).
func TestTemplateBudgetOfRealTemplates(t *testing.T) {
	long := func(system bool) []Message {
		var msgs []Message
		if system {
			msgs = append(msgs, Message{Role: "system", Content: "You are a helpful assistant.\nAnswer briefly."})
		}
		for i := range 200 {
			msgs = append(msgs,
				Message{Role: "user", Content: fmt.Sprintf("Question %d: %s?", i, strings.Repeat("what about this ", i%7+1))},
				Message{Role: "assistant", Content: fmt.Sprintf("<think>\nthinking %d\n</think>\n\nAnswer %d.\n%s", i, i, strings.Repeat("Some words. ", i%5+1))})
		}
		return msgs
	}
	worst := map[string]float64{}
	check := func(name string, ct *ChatTemplate, msgs []Message, agp bool) {
		vals, err := messageValues(msgs)
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]jinja.Value{
			"messages":              jinja.NewList(vals),
			"add_generation_prompt": jinja.NewBool(agp),
			"tools":                 jinja.None(),
			"documents":             jinja.None(),
		}
		if ct.BOS != "" {
			vars["bos_token"] = jinja.NewString(ct.BOS)
		}
		if ct.EOS != "" {
			vars["eos_token"] = jinja.NewString(ct.EOS)
		}
		for k, v := range ct.vars {
			vars[k] = v
		}
		size := tplValueSize(vars)
		lim := tplDefaultLimits(size)
		_, used, err := ct.tmpl.run(vars, lim)
		if err != nil && strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: %v", name, err)
		}
		for what, f := range map[string]float64{
			"steps":  float64(used.Steps) / float64(lim.Steps) * 8,
			"bytes":  float64(used.Bytes) / float64(lim.Bytes) * 8,
			"output": float64(used.Output) / float64(lim.Output) * 4,
		} {
			if f > 1 {
				t.Errorf("%s: %s used %.0f%% of its limit", name, what, f*100)
			}
		}
		worst["steps/byte"] = max(worst["steps/byte"], float64(used.Steps)/float64(size))
		worst["bytes/byte"] = max(worst["bytes/byte"], float64(used.Bytes)/float64(size))
		worst["steps/message"] = max(worst["steps/message"], float64(used.Steps)/float64(len(msgs)))
		worst["output/byte"] = max(worst["output/byte"], float64(used.Output)/float64(size))
	}
	for _, fx := range loadChatFixtures(t) {
		ct := fx.template(t)
		for _, c := range fx.Cases {
			check(fx.name+"/"+c.Name, ct, fixtureMessages(t, c.Messages), c.AGP)
		}
		for _, system := range []bool{true, false} {
			msgs := long(system)
			if _, err := ct.Render(msgs, false); err != nil {
				continue // the template takes no system message
			}
			check(fmt.Sprintf("%s/400 turns (system %v)", fx.name, system), ct, msgs, true)
		}
	}
	t.Logf("worst: %v", worst)
	if worst["steps/byte"] > 1 || worst["bytes/byte"] > 4 || worst["steps/message"] > 100 {
		t.Errorf("the real templates take more than they did (%v): revisit tplDefaultLimits' rates", worst)
	}
}
