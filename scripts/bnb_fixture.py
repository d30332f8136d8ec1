#!/usr/bin/env python3
"""Writes hf/testdata/llama-nf4: hf/testdata/llama-f32's Llama as transformers
saves it when loaded with load_in_4bit (bitsandbytes nf4), for the Go tests of
hf's 4-bit import; and qwen3-nf4 and phi3-nf4 the same from qwen3-f32 and
phi3-f32 (Phi-3's fused qkv_proj and gate_up_proj quantized whole).

bitsandbytes is not packaged for Debian, so this writes its layout itself,
from the reference definition of NF4 in scripts/quant_fixtures.py (read from
bitsandbytes-foundation/bitsandbytes, functional.py and
backends/default/ops.py) and from Linear4bit._save_to_state_dict /
QuantState.as_dict(packed=True): every Linear weight W of the decoder layers
(q/k/v/o_proj or qkv_proj, gate/up/down_proj or gate_up_proj; not the
embedding, the norms or lm_head,
which transformers keeps in torch_dtype) becomes

    W.weight                                 U8 [ceil(n/2), 1]  codes, high nibble first
    W.weight.absmax                          U8 [blocks]        absmax codes (double quantization)
    W.weight.quant_map                       F32 [16]           the NF4 levels
    W.weight.nested_absmax                   F32 [nested]       one scale per 256 absmaxes
    W.weight.nested_quant_map                F32 [256]          the dynamic map
    W.weight.quant_state.bitsandbytes__nf4   U8 [len]           json.dumps of quant_type, blocksize,
                                                                dtype, shape, nested_blocksize,
                                                                nested_dtype, nested_offset

Layer 1 is written without double quantization (bnb_4bit_use_double_quant
off: F32 absmaxes, no nested entries), so both forms are read.

Run with Debian's python3-torch:  /usr/bin/python3 scripts/bnb_fixture.py
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from quant_fixtures import DYN, NF4, blockwise  # noqa: E402

HERE = os.path.join(os.path.dirname(__file__), "..", "hf", "testdata")
PAIRS = (("llama-f32", "llama-nf4"), ("qwen3-f32", "qwen3-nf4"), ("phi3-f32", "phi3-nf4"))
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        a, b = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").copy()).reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes); laid out by
    descending element size, then name, as the reference writer does."""
    bits = {"F32": 32, "U8": 8}
    names = sorted(tensors, key=lambda k: (-bits[tensors[k][0]], k))
    header, off = {}, 0
    for k in names:
        dt, shape, b = tensors[k]
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for k in names:
            f.write(tensors[k][2])


def f32(x):
    return x.numpy().astype("<f4").tobytes()


def bnb(name, w, nested):
    """The entries of one 4-bit weight (quantize_4bit, compress_statistics=nested)."""
    a = w.reshape(-1).float()
    q, absmax = blockwise(a, NF4, 64)
    if q.numel() % 2:
        q = torch.cat([q, torch.tensor([7], dtype=torch.int32)])
    q8 = q.to(torch.uint8)
    packed = ((q8[::2] << 4) | q8[1::2]).numpy().tobytes()
    state = {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": list(w.shape)}
    out = {
        name: ("U8", [len(packed), 1], packed),
        name + ".quant_map": ("F32", [16], f32(NF4)),
    }
    if nested:
        offset = np.float32(math.fsum(absmax.double().tolist()) / absmax.numel())
        aq, scales = blockwise(absmax - torch.tensor(offset), DYN, 256)
        out[name + ".absmax"] = ("U8", [aq.numel()], aq.to(torch.uint8).numpy().tobytes())
        out[name + ".nested_absmax"] = ("F32", [scales.numel()], f32(scales))
        out[name + ".nested_quant_map"] = ("F32", [256], f32(DYN))
        state.update({"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(offset)})
    else:
        out[name + ".absmax"] = ("F32", [absmax.numel()], f32(absmax))
    js = json.dumps(state).encode()
    out[name + ".quant_state.bitsandbytes__nf4"] = ("U8", [len(js)], js)
    return out


def convert(src, out):
    w = read_safetensors(os.path.join(src, "model.safetensors"))
    tensors = {}
    for name, x in sorted(w.items()):
        parts = name.split(".")
        if len(parts) == 6 and parts[4] in LINEAR:
            tensors.update(bnb(name, x, nested=parts[2] != "1"))
        else:
            tensors[name] = ("F32", list(x.shape), f32(x))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = "float32"
    cfg["quantization_config"] = {
        "quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
        "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8",
        "llm_int8_skip_modules": None,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def main():
    for src, out in PAIRS:
        convert(os.path.join(HERE, src), os.path.join(HERE, out))


if __name__ == "__main__":
    main()
