package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// The files of LoRA adapters in PEFT's layout.
const (
	peftWeights = "adapter_model.safetensors"
	peftConfig  = "adapter_config.json"
)

// peftFiles are m's LoRA adapters as PEFT saves them: adapter_model
// .safetensors holding, for each adapted layer, its
// base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight
// [out, r] (PEFT's A and B are memfit's, the scale α/r alike), in dt,
// and adapter_config.json (LORA, CAUSAL_LM, r, lora_alpha, lora_dropout,
// target_modules: module suffixes when every layer of that name is
// adapted, else the modules' full names, which PEFT matches exactly).
// Modules are named as modelType's checkpoints name them (PEFTName). All
// adapters must share one rank, scale and dropout, as one PEFT config
// says for all.
func peftFiles(m nn.Module, modelType, base string, dt safetensors.DType) ([]namedFile, error) {
	type adapted struct {
		module string
		a, b   *tensor.Tensor
	}
	var (
		ads            []adapted
		rank           int
		scale, dropout float64
		all            = map[string]int{} // module suffix → layers of that name
		suffixOf       func(string) string
	)
	suffixOf = func(name string) string { return name[strings.LastIndexByte(name, '.')+1:] }
	var err error
	nn.Walk(m, func(x nn.Module) error {
		l, ok := x.(*nn.Linear)
		if !ok || err != nil {
			return nil
		}
		name, ok := PEFTName(modelType, l.Weight.Name())
		if !ok {
			err = fmt.Errorf("hf: layer %s has no name in %s's layout", l.Weight.Name(), modelType)
			return nil
		}
		all[suffixOf(name)]++
		a := l.Adapter
		if a == nil {
			return nil
		}
		if len(ads) > 0 && (a.Rank != rank || a.Scale != scale || a.Dropout != dropout) {
			err = fmt.Errorf("hf: adapters of rank %d, scale %v and dropout %v beside ones of rank %d, scale %v and dropout %v: PEFT's config says one for all", a.Rank, a.Scale, a.Dropout, rank, scale, dropout)
			return nil
		}
		rank, scale, dropout = a.Rank, a.Scale, a.Dropout
		ads = append(ads, adapted{name, a.A, a.B})
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(ads) == 0:
		return nil, fmt.Errorf("hf: the model has no LoRA adapters to write in PEFT's layout")
	}
	var srcs []safetensors.Source
	count := map[string]int{}
	for _, ad := range ads {
		count[suffixOf(ad.module)]++
		for _, p := range []struct {
			t    *tensor.Tensor
			name string
		}{{ad.a, "lora_A"}, {ad.b, "lora_B"}} {
			t := p.t
			srcs = append(srcs, safetensors.Source{Name: "base_model.model." + ad.module + "." + p.name + ".weight", DType: dt,
				Shape: append([]int(nil), t.Shape()...), Fill: func(w io.Writer) error {
					var v []float32
					if err := tensor.Catch(func() error { v = t.Float32s(); return nil }); err != nil {
						return err
					}
					return writeValues(w, dt, v)
				}})
		}
	}
	slices.SortFunc(srcs, func(a, b safetensors.Source) int { return strings.Compare(a.Name, b.Name) })
	var targets []string
	for _, ad := range ads {
		t := ad.module
		if s := suffixOf(t); count[s] == all[s] {
			t = s
		}
		if !slices.Contains(targets, t) {
			targets = append(targets, t)
		}
	}
	slices.Sort(targets)
	var w bytes.Buffer
	if err := safetensors.Write(&w, map[string]string{"format": "pt", "producer": "memfit"}, srcs); err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
		"r": rank, "lora_alpha": scale * float64(rank), "lora_dropout": dropout, "target_modules": targets,
		"bias": "none", "fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true,
		"use_rslora": false, "use_dora": false, "modules_to_save": nil, "layers_to_transform": nil, "layers_pattern": nil,
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	return []namedFile{{peftWeights, w.Bytes()}, {peftConfig, append(cj, '\n')}}, nil
}
