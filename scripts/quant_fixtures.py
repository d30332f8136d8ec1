#!/usr/bin/env python3
"""Writes device/testdata/quant.json: reference quantizations of the frozen
weight formats (device/quant4.go, device/quantint8.go) for the Go tests,
which compare codes bit for bit and dequantized values exactly.

nf4 is QLoRA's NormalFloat4 with double quantization as bitsandbytes defines
it. This script does not run bitsandbytes (it is not packaged for Debian); it
implements the definitions read from bitsandbytes-foundation/bitsandbytes
(95f9af3): functional.py's get_4bit_type("nf4"), create_dynamic_map,
quantize_4bit(compress_statistics=True), quantize_blockwise(blocksize=256)
and dequantize_4bit, and backends/default/ops.py, the PyTorch kernels those
call (quantize_4bit, quantize_blockwise, dequantize_4bit,
dequantize_blockwise): blocks of 64, x·(1/absmax) clamped to [-1, 1] and
bucketized against the midpoints of the code table (ties to the lower code),
a partial last block divided by its clamped absmax, codes packed high
nibble first; the absmaxes less their mean quantized with the signed 8-bit
dynamic map in blocks of 256. The mean is math.fsum's correctly rounded F64
sum divided by the count, rounded to F32 (bitsandbytes takes PyTorch's F32
mean, which can differ in the last bit). int8 is memfit's own: blocks of 64,
code = round_half_even(x·fl32(127/absmax)), value = code·fl32(absmax/127).

Run with Debian's python3-torch:  /usr/bin/python3 scripts/quant_fixtures.py
"""
import base64
import json
import math
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "device", "testdata", "quant.json")

NF4 = torch.tensor([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
], dtype=torch.float32)
NF4 = NF4 / NF4.abs().max()


def dynamic_map():
    """The signed dynamic map: means of linspace(0.1, 1, 2^i + 1) scaled by
    10^(i-6), both signs, plus 0 and 1, sorted (7 exponent bits, 8 bits)."""
    data = []
    for i in range(7):
        b = torch.linspace(0.1, 1, 2 ** i + 1, dtype=torch.float32)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    assert len(data) == 256
    data.sort()
    return torch.tensor(data, dtype=torch.float32)


DYN = dynamic_map()


def blockwise(a, code, block):
    """Codes and absmaxes of a (F32, flat) in blocks, as the PyTorch
    definition of quantize_blockwise / quantize_4bit computes them."""
    n = a.numel()
    rem = n % block
    full = n - rem
    blocks = full // block
    com = a[:full].reshape(blocks, block)
    absmax = com.abs().max(dim=-1)[0] if blocks else torch.zeros(0)
    scaled = torch.clamp(com * (1.0 / absmax.clamp(min=1e-38).view(-1, 1)), -1, 1).reshape(-1)
    if rem:
        am = a[full:].abs().max().clamp(min=1e-38)
        absmax = torch.cat([absmax, am.unsqueeze(0)])
        scaled = torch.cat([scaled, torch.clamp(a[full:] / am, -1, 1)])
    bounds = (code[:-1] + code[1:]) / 2
    q = torch.bucketize(scaled, bounds, out_int32=True)
    return q, absmax.float()


def nf4(x):
    a = x.reshape(-1).float()
    q, absmax = blockwise(a, NF4, 64)
    if q.numel() % 2:
        q = torch.cat([q, torch.tensor([7], dtype=torch.int32)])
    q8 = q.to(torch.uint8)
    packed = (q8[::2] << 4) | q8[1::2]
    offset = np.float32(math.fsum(absmax.double().tolist()) / absmax.numel())
    aq, nested = blockwise(absmax - torch.tensor(offset), DYN, 256)
    # Dequantize: absmax = map[q]·s + offset, value = level·absmax (F32).
    n = a.numel()
    deq_absmax = DYN[aq.long()] * nested.repeat_interleave(256)[: aq.numel()]
    deq_absmax = deq_absmax + torch.tensor(offset)
    levels = NF4[q[:n].long()]
    values = levels * deq_absmax.repeat_interleave(64)[:n]
    return {
        "codes": b64(packed.numpy().tobytes()),
        "absmax": b64(absmax.numpy().astype("<f4").tobytes()),
        "absmax_codes": b64(aq.to(torch.uint8).numpy().tobytes()),
        "nested": b64(nested.numpy().astype("<f4").tobytes()),
        "offset": int(np.float32(offset).view(np.uint32)),
        "values": values,
    }


def int8(x):
    a = x.reshape(-1).float()
    n = a.numel()
    nb = (n + 63) // 64
    pad = torch.cat([a, torch.zeros(nb * 64 - n)]).reshape(nb, 64)
    absmax = pad.abs().max(dim=-1)[0]
    # torch.div, not 127.0 / absmax: PyTorch computes a scalar over a
    # tensor as reciprocal(absmax)·127, two roundings.
    r = torch.div(torch.full_like(absmax, 127.0), torch.where(absmax > 0, absmax, torch.ones_like(absmax)))
    r = torch.where(absmax > 0, r, torch.zeros_like(absmax))
    q = torch.clamp(torch.round(pad * r.view(-1, 1)), -127, 127).reshape(-1)[:n].to(torch.int8)
    step = absmax / 127.0  # a tensor over a scalar: one division
    values = q.float() * step.repeat_interleave(64)[:n]
    return {
        "codes": b64(q.numpy().tobytes()),
        "absmax": b64(absmax.numpy().astype("<f4").tobytes()),
        "values": values,
    }


def b64(b):
    return base64.b64encode(b).decode()


def raw(x):
    if x.dtype == torch.float32:
        return x.numpy().astype("<f4").tobytes()
    if x.dtype == torch.float16:
        return x.numpy().astype("<f2").tobytes()
    return x.view(torch.int16).numpy().astype("<i2").tobytes()  # bfloat16 bits


def case(name, fmt, x):
    c = (nf4 if fmt == "nf4" else int8)(x)
    v = c.pop("values")
    c.update({
        "name": name, "format": fmt, "dtype": {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[x.dtype],
        "n": x.numel(), "x": b64(raw(x)),
        "values": b64(v.numpy().astype("<f4").tobytes()),
    })
    if x.numel() < 5000:  # the 16-bit roundings of the smaller cases
        c["values_bf16"] = b64(raw(v.to(torch.bfloat16)))
        c["values_f16"] = b64(raw(v.to(torch.float16)))
    return c


def main():
    g = torch.Generator().manual_seed(33)
    normal = lambda n, s=1.0: torch.randn(n, generator=g) * s
    cases = []
    # Blocks of many scales (each its own) and an all-zero block.
    x = normal(64 * 40) * torch.logspace(-3, 1, 40).repeat_interleave(64)
    x[64 * 5: 64 * 6] = 0
    cases.append(case("nf4-scales-f32", "nf4", x))
    # A whole nested block and a partial one (263 blocks), from bf16
    # weights of several scales.
    x = normal(64 * (256 + 7)) * torch.logspace(-3, -1, 263).repeat_interleave(64)
    cases.append(case("nf4-nested-bf16", "nf4", x.to(torch.bfloat16)))
    # An odd length: a partial last block and a padded last nibble.
    cases.append(case("nf4-odd-f16", "nf4", (normal(64 * 9 + 37) * 0.5).to(torch.float16)))
    # Values on the midpoints between levels (ties take the lower code),
    # on the levels, and past them.
    bounds = (NF4[:-1] + NF4[1:]) / 2
    tie = torch.cat([torch.tensor([1.0]), bounds, NF4, -bounds, torch.linspace(-1, 1, 64 * 2 - 1 - 30 - 16 - 15)])
    cases.append(case("nf4-ties-f32", "nf4", tie))
    x = normal(64 * 50 + 17) * torch.logspace(-2, 2, 64 * 50 + 17)
    x[64 * 3: 64 * 4] = 0
    x[64 * 7: 64 * 8] = torch.cat([torch.tensor([127.0]), torch.arange(-31, 32) + 0.5])  # 127/absmax = 1: ties
    cases.append(case("int8-scales-f32", "int8", x))
    cases.append(case("int8-bf16", "int8", (normal(64 * 40) * 0.02).to(torch.bfloat16)))
    out = {
        "torch": torch.__version__,
        "nf4_levels": [int(v) for v in NF4.numpy().view(np.uint32)],
        "dynamic_map": [int(v) for v in DYN.numpy().view(np.uint32)],
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
