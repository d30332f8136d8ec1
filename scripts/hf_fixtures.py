#!/usr/bin/env python3
"""Writes hf/testdata: a tiny random GPT-2 in Hugging Face's layout and names
(model.safetensors + config.json, F32 and BF16), with reference logits for a
fixed batch and 20 greedy tokens, computed by a plain-PyTorch GPT-2 (the
architecture written out here; no transformers package needed).

Run with Debian's python3-torch:  /usr/bin/python3 scripts/hf_fixtures.py
"""
import json
import math
import os
import struct

import torch

torch.manual_seed(0)
OUT = os.path.join(os.path.dirname(__file__), "..", "hf", "testdata")
CFG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2, "n_embd": 16,
       "n_positions": 32, "n_ctx": 32, "vocab_size": 50, "layer_norm_epsilon": 1e-5,
       "activation_function": "gelu_new", "tie_word_embeddings": True}
L, H, D, T, V = CFG["n_layer"], CFG["n_head"], CFG["n_embd"], CFG["n_positions"], CFG["vocab_size"]


def weights():
    w = {}
    r = lambda *s: torch.randn(*s, dtype=torch.float64) * 0.2
    w["transformer.wte.weight"] = r(V, D)
    w["transformer.wpe.weight"] = r(T, D)
    for i in range(L):
        p = f"transformer.h.{i}."
        w[p + "ln_1.weight"] = 1 + r(D) * 0.5
        w[p + "ln_1.bias"] = r(D)
        w[p + "attn.c_attn.weight"] = r(D, 3 * D)  # Conv1D: (in, out)
        w[p + "attn.c_attn.bias"] = r(3 * D)
        w[p + "attn.c_proj.weight"] = r(D, D)
        w[p + "attn.c_proj.bias"] = r(D)
        w[p + "ln_2.weight"] = 1 + r(D) * 0.5
        w[p + "ln_2.bias"] = r(D)
        w[p + "mlp.c_fc.weight"] = r(D, 4 * D)
        w[p + "mlp.c_fc.bias"] = r(4 * D)
        w[p + "mlp.c_proj.weight"] = r(4 * D, D)
        w[p + "mlp.c_proj.bias"] = r(D)
    w["transformer.ln_f.weight"] = 1 + r(D) * 0.5
    w["transformer.ln_f.bias"] = r(D)
    return w


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, idx):
    b, t = idx.shape
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][:t]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (D,), w[p + ".weight"], w[p + ".bias"], CFG["layer_norm_epsilon"])
    for i in range(L):
        p = f"transformer.h.{i}."
        a = ln(x, p + "ln_1")
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(D, dim=2)
        sh = lambda z: z.view(b, t, H, D // H).transpose(1, 2)
        q, k, v = sh(q), sh(k), sh(v)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, D)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = ln(x, p + "ln_2")
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = ln(x, "transformer.ln_f")
    return x @ w["transformer.wte.weight"].T  # tied head


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        if dtype == "BF16":
            raw = t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        else:
            raw = t.to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    w = weights()
    # Buffers old GPT-2 checkpoints carry: the loader must skip them.
    extra = {f"transformer.h.{i}.attn.bias": torch.tril(torch.ones(1, 1, T, T, dtype=torch.float64)) for i in range(L)}
    batch = torch.tensor([[1, 4, 9, 16, 25, 36, 49, 0], [7, 7, 3, 2, 11, 13, 17, 19]])
    prompt = [3, 1, 4, 1, 5]
    for dtype in ("F32", "BF16"):
        d = os.path.join(OUT, "gpt2-" + dtype.lower())
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(CFG, f, indent=2)
        write_safetensors(os.path.join(d, "model.safetensors"), {**w, **extra}, dtype)
        # The reference runs in float64 on the weights as stored.
        ws = {k: (v.to(torch.bfloat16) if dtype == "BF16" else v.to(torch.float32)).to(torch.float64) for k, v in w.items()}
        with torch.no_grad():
            logits = forward(ws, batch)
            seq = list(prompt)
            for _ in range(20):
                nxt = forward(ws, torch.tensor([seq]))[0, -1].argmax().item()
                seq.append(nxt)
        ref = {"batch": batch.tolist(), "logits": logits.flatten().tolist(), "prompt": prompt, "greedy": seq[len(prompt):]}
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f)


if __name__ == "__main__":
    main()
