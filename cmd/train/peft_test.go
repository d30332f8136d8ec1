package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Adapters a LoRA run writes with -save-peft start another run with
// -init-adapter on the same -init base: they generate what the merged
// export generates, train further (over an nf4 base under bf16 autocast,
// and are written again), and plan;
// flags that contradict the file, or no base, are refused.
func TestInitAdapterPEFT(t *testing.T) {
	dir := t.TempDir()
	shard := fixtureShard(t, dir, 3000)
	fixture := filepath.Join("..", "..", "hf", "testdata", "phi3-f32")
	run := []string{"-quiet", "-data", shard, "-batch", "4", "-context", "16", "-eval-every", "0"}
	base := slices.Clip(append([]string{"-init", fixture}, run...)) // clipped: each append to it is a new slice
	tuned, again := filepath.Join(dir, "tuned"), filepath.Join(dir, "again")
	code, _, errs := runCmd(t, append(base, "-lora", "2", "-lora-alpha", "4", "-lora-targets", "qkv_proj,gate_up_proj", "-lr", "0.01", "-steps", "3",
		"-save-format", "hf", "-save-peft", "-save", tuned)...)
	if code != 0 {
		t.Fatalf("LoRA run with -save-peft: exit %d: %s", code, errs)
	}
	gen := []string{"-generate", "8", "-prompt", "3 1 4 1 5"}
	code, merged, errs := runCmd(t, append(append([]string{"-init", tuned}, run...), gen...)...)
	if code != 0 {
		t.Fatalf("-generate from the merged export: exit %d: %s", code, errs)
	}
	code, adapted, errs := runCmd(t, append(append(base, "-init-adapter", tuned), gen...)...)
	if code != 0 {
		t.Fatalf("-generate with -init-adapter: exit %d: %s", code, errs)
	}
	if adapted != merged || len(strings.Fields(adapted)) != 8 {
		t.Errorf("-init-adapter generates %q, the merged export %q", adapted, merged)
	}
	code, _, errs = runCmd(t, append(base, "-init-adapter", tuned, "-steps", "1", "-base", "nf4", "-amp", "bf16", "-save-format", "hf", "-save-peft", "-save", again)...)
	if code != 0 {
		t.Fatalf("training -init-adapter's adapters further: exit %d: %s", code, errs)
	}
	peft := func(dir string) (c struct {
		R       int      `json:"r"`
		Alpha   float64  `json:"lora_alpha"`
		Targets []string `json:"target_modules"`
	}) {
		b, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if a, b := peft(again), peft(tuned); a.R != 2 || a.Alpha != 4 || !slices.Equal(a.Targets, b.Targets) || !slices.Equal(b.Targets, []string{"gate_up_proj", "qkv_proj"}) {
		t.Errorf("the further-trained adapters' config %+v, the first %+v", a, b)
	}
	if code, out, errs := runCmd(t, append(base, "-init-adapter", tuned, "-steps", "1", "-plan")...); code != 0 || !strings.Contains(out, "LoRA rank 2 on the layers of "+tuned) {
		t.Errorf("-plan with -init-adapter: exit %d: %s%s", code, out, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-quiet", "-init-adapter", tuned, "-steps", "1"}, "needs -init"},
		{append(base, "-init-adapter", tuned, "-lora", "4"), "-lora 4: -init-adapter " + tuned + " holds adapters of rank 2"},
		{append(base, "-init-adapter", tuned, "-lora-targets", "o_proj"), "-lora-targets o_proj"},
		{append(base, "-init-adapter", dir), "adapter_config.json: no such file"},
	} {
		code, _, errs := runCmd(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}
