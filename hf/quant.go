package hf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// Quantized frozen weights on import and export.
//
// With Options.Quantize an import stores the weights it names in NF4 or
// Int8 as it reads them: the model is built with deferred parameters
// and given its memory a parameter at a time (tensor.Materialize), each
// quantized weight straight from its host values
// (tensor.QuantizeFloat32), so that the device holds the quantized
// model plus one tensor, never the model in a float dtype.
//
// A checkpoint in bitsandbytes' 4-bit layout (transformers' save of a
// load_in_4bit model: W.weight the packed codes, beside it
// W.weight.absmax, .quant_map, .nested_absmax, .nested_quant_map and
// .quant_state.bitsandbytes__nf4) loads into an NF4 weight as it is
// stored (device.BitsandbytesNF4.Parts, tensor.FromNF4): no 16-bit copy,
// the checkpoint's own codes and tables. Into a float weight (a run that
// does not quantize it) or an Int8 one, its values are dequantized on the
// host first.
//
// Save writes a model holding quantized weights in BF16 (SaveOptions):
// each weight dequantized (and its adapter merged) one tensor at a time.

// bnbState is the suffix of the JSON entry bitsandbytes writes beside a
// 4-bit weight; the entry's presence marks the layout.
const bnbState = ".quant_state.bitsandbytes__"

// bnbWeight reads the weight hn in bitsandbytes' 4-bit layout: ok is
// false when the checkpoint stores hn otherwise. It returns the weight's
// shape (from its quant_state), its NF4 parts (the codes alias the mapped
// file) and the names of the entries it read.
func bnbWeight(c *Checkpoint, hn string) (shape []int, p device.NF4Parts, names []string, ok bool, err error) {
	qs, ok := c.Tensor(hn + bnbState + "nf4")
	if !ok {
		if fp4, isFP4 := c.Tensor(hn + bnbState + "fp4"); isFP4 {
			return nil, p, nil, false, fmt.Errorf("hf: %s: tensor %s is bitsandbytes' fp4; memfit reads its nf4 layout only", fp4.File, hn)
		}
		return nil, p, nil, false, nil
	}
	w, _ := c.Tensor(hn)
	need := func(suffix string) ([]byte, error) {
		t, ok := c.Tensor(hn + suffix)
		if !ok {
			return nil, fmt.Errorf("hf: %s: tensor %s%s is missing beside %s%snf4", qs.File, hn, suffix, hn, bnbState)
		}
		names = append(names, hn+suffix)
		return t.Data, nil
	}
	b := device.BitsandbytesNF4{Weight: w.Data, QuantState: qs.Data}
	names = append(names, hn, hn+bnbState+"nf4")
	if b.Absmax, err = need(".absmax"); err != nil {
		return nil, p, nil, false, err
	}
	if b.QuantMap, err = need(".quant_map"); err != nil {
		return nil, p, nil, false, err
	}
	_, nested := c.Tensor(hn + ".nested_absmax")
	_, nestedMap := c.Tensor(hn + ".nested_quant_map")
	if nested || nestedMap {
		if b.NestedAbsmax, err = need(".nested_absmax"); err != nil {
			return nil, p, nil, false, err
		}
		if b.NestedQuantMap, err = need(".nested_quant_map"); err != nil {
			return nil, p, nil, false, err
		}
	}
	shape, p, err = b.Parts(hn)
	if err != nil {
		return nil, p, nil, false, fmt.Errorf("hf: %s: %v", w.File, err)
	}
	if err := nf4Finite(&p); err != nil {
		return nil, p, nil, false, fmt.Errorf("hf: %s: tensor %s: %v", w.File, hn, err)
	}
	return shape, p, names, true, nil
}

// nf4Finite checks that every value of p dequantizes to a finite number:
// each level and each block's absmax (a value is one times the other), a
// pass over the blocks, not the elements. A nested offset finite in
// float64 but not in float32, or a scale that overflows, shows there.
func nf4Finite(p *device.NF4Parts) error {
	for i, l := range p.Levels {
		if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
			return fmt.Errorf("quant_map level %d is %v: the weights it dequantizes are not finite", i, l)
		}
	}
	for b := range p.AbsmaxCodes {
		if a := p.Absmax(b); math.IsNaN(float64(a)) || math.IsInf(float64(a), 0) {
			return fmt.Errorf("the absmax of block %d (elements %d to %d) dequantizes to %v in float32: the weights are not finite",
				b, b*device.QuantBlock, (b+1)*device.QuantBlock-1, a)
		}
	}
	return nil
}

// isBnb reports whether the checkpoint stores hn in bitsandbytes' 4-bit
// layout (of any quant type).
func isBnb(c *Checkpoint, hn string) bool {
	_, nf4 := c.Tensor(hn + bnbState + "nf4")
	_, fp4 := c.Tensor(hn + bnbState + "fp4")
	return nf4 || fp4
}

// materializeAll gives m, built with deferred parameters, its memory a
// parameter at a time in bs's order: the weight of each Linear layer that
// quantize names a quantized dtype for is made in that dtype from its
// host values (or, NF4 from a 4-bit checkpoint, from its parts as
// stored) and frozen; every other parameter is read as fill reads it.
func materializeAll(m nn.Module, bs []binding, files *openFiles, quantize func(name string) device.DType, park func(*tensor.Tensor) error) error {
	linear := nn.LinearWeights(m)
	blocks := nn.BlockParameters(m)
	for _, b := range bs {
		q := device.Invalid
		if linear[b.p] {
			q = quantize(b.p.Name())
		}
		if err := materialize(b, q, files); err != nil {
			return err
		}
		if park != nil && q.IsQuantized() && blocks[b.p] {
			if err := park(b.p); err != nil {
				return fmt.Errorf("hf: %s: tensor %s: %w", b.t.File, b.name, err)
			}
		}
	}
	return nil
}

// materialize gives b's deferred parameter its memory: quantized to q, or
// as the checkpoint holds it when q is Invalid.
func materialize(b binding, q device.DType, files *openFiles) error {
	p := b.p
	switch {
	case q == device.Invalid:
		if err := fill(b, files); err != nil {
			return err
		}
		if err := p.Materialize(); err != nil {
			return fmt.Errorf("hf: %s: tensor %s: %w", b.t.File, b.name, err)
		}
		return nil
	case !q.IsQuantized():
		return fmt.Errorf("hf: Options.Quantize gives %v for %s: want nf4, int8 or none", q, p.Name())
	}
	p.SetRequiresGrad(false) // a quantized weight is frozen
	var (
		src *tensor.Tensor
		err error
	)
	if b.nf4 != nil && q == device.NF4 {
		src, err = tensor.FromNF4(p.Device(), p.Shape(), *b.nf4, memory.Parameter)
	} else {
		var vals []float32
		if vals, err = b.values(); err != nil {
			return err
		}
		src, err = tensor.QuantizeFloat32(p.Device(), q, vals, p.Shape(), memory.Parameter)
	}
	if err == nil {
		if err = p.MaterializeFrom(src); err != nil {
			src.Release()
		}
	}
	if err != nil {
		return fmt.Errorf("hf: %s: tensor %s: %w", b.t.File, b.name, err)
	}
	return nil
}

// SaveOptions are how SaveWith writes a model.
type SaveOptions struct {
	// DType of the tensors written: safetensors.F32 or safetensors.BF16
	// (each value rounded to nearest, ties to even). Empty: BF16 when the
	// model holds a quantized weight (a QLoRA base has no more precision
	// than bf16 to keep, and bf16 is what such a model is loaded in) or
	// when From's config.json says bfloat16 (the checkpoint's dtype, as
	// save_pretrained keeps it), F32 otherwise.
	DType safetensors.DType
	// ShardBytes is the size past which the weights are sharded (0:
	// ShardBytes, transformers' 5 GB).
	ShardBytes int64
	// Tokenizer, a tokenizer.json or its directory, is copied beside the
	// model (tokenizer.json, tokenizer_config.json,
	// special_tokens_map.json, chat_template.jinja where present), so that
	// the directory is a model transformers and vLLM load whole.
	Tokenizer string
	// ChatTemplate, when the tokenizer's files hold none, is written into
	// tokenizer_config.json's chat_template.
	ChatTemplate string
	// From is the directory the model was initialized from: its token
	// ids (bos, eos, pad) go into config.json and its
	// generation_config.json beside it (or one of those ids).
	From string
	// Adapters also writes the model's LoRA adapters in PEFT's layout
	// (adapter_model.safetensors, adapter_config.json naming From as the
	// base), beside the merged model.
	Adapters bool
}

// dtypeFor resolves o.DType for m.
func (o SaveOptions) dtypeFor(m nn.Module) (safetensors.DType, error) {
	switch o.DType {
	case safetensors.F32, safetensors.BF16:
		return o.DType, nil
	case "":
		for _, p := range m.Parameters() {
			if p.DType().IsQuantized() {
				return safetensors.BF16, nil
			}
		}
		if o.fromBF16() {
			// An export keeps its checkpoint's dtype, as save_pretrained
			// keeps the dtype a model was loaded in: a bf16 release comes
			// back in bf16 (and Gemma's embedding scale, which follows
			// the weights' dtype, with it).
			return safetensors.BF16, nil
		}
		return safetensors.F32, nil
	}
	return "", fmt.Errorf("hf: SaveOptions.DType %s: memfit writes F32 or BF16", o.DType)
}

// fromBF16 reports whether o.From's config.json says its weights are
// bfloat16 (torch_dtype, or transformers 5's dtype).
func (o SaveOptions) fromBF16() bool {
	if o.From == "" {
		return false
	}
	b, _, err := readConfig(o.From)
	if err != nil || b == nil {
		return false
	}
	var cfg struct {
		TorchDType string `json:"torch_dtype"`
		DType      string `json:"dtype"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return false
	}
	return cfg.TorchDType == "bfloat16" || cfg.DType == "bfloat16"
}

// torchDType is config.json's torch_dtype for a dtype Save writes.
func torchDType(d safetensors.DType) string {
	if d == safetensors.BF16 {
		return "bfloat16"
	}
	return "float32"
}

// writeValues writes v to w in dtype d (F32 or BF16), through a small
// buffer: the bytes of a whole tensor are never held at once.
func writeValues(w io.Writer, d safetensors.DType, v []float32) error {
	if d == safetensors.BF16 {
		return safetensors.WriteBF16s(w, v)
	}
	return safetensors.WriteFloat32s(w, v)
}
