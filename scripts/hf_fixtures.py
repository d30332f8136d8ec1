#!/usr/bin/env python3
"""Writes hf/testdata: a tiny random GPT-2 and a tiny random Llama in Hugging
Face's layout and names (model.safetensors + config.json, F32 and BF16), with
reference logits for a fixed batch and 20 greedy tokens, computed by
plain-PyTorch GPT-2 and Llama (the architectures written out here, as
transformers' GPT2LMHeadModel and LlamaForCausalLM compute them; no
transformers package needed).

The Llamas: llama-f32 and llama-bf16 have grouped-query attention (4 heads,
2 key/value heads), an untied head and rope_theta 10000; llama3-f32 has
Llama 3.1's rope_scaling (rope_type llama3, with frequencies in all three
of its bands), rope_theta 500000 and a tied head.

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


LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16, "intermediate_size": 40,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
         "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False, "vocab_size": 50,
         "max_position_embeddings": 32, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
LLAMA3 = dict(LLAMA, hidden_size=32, intermediate_size=64, rope_theta=500000.0, tie_word_embeddings=True,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 512})


def llama_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g) * 0.2
    d, f, h, kv = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = d // h
    w = {"model.embed_tokens.weight": r(cfg["vocab_size"], d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + r(d) * 0.5
        w[p + "self_attn.q_proj.weight"] = r(h * hd, d)  # nn.Linear: (out, in)
        w[p + "self_attn.k_proj.weight"] = r(kv * hd, d)
        w[p + "self_attn.v_proj.weight"] = r(kv * hd, d)
        w[p + "self_attn.o_proj.weight"] = r(d, h * hd)
        w[p + "post_attention_layernorm.weight"] = 1 + r(d) * 0.5
        w[p + "mlp.gate_proj.weight"] = r(f, d)
        w[p + "mlp.up_proj.weight"] = r(f, d)
        w[p + "mlp.down_proj.weight"] = r(d, f)
    w["model.norm.weight"] = 1 + r(d) * 0.5
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = r(cfg["vocab_size"], d)
    return w


def llama_inv_freq(cfg):
    """transformers' rope initialisation, in float32 as it computes it
    (_compute_default_rope_parameters, _compute_llama3_parameters)."""
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = cfg["rope_scaling"]
    if s is None:
        return inv
    assert s["rope_type"] == "llama3"
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], s["original_max_position_embeddings"]
    low_wave, high_wave = old / low, old / high
    wave = 2 * math.pi / inv
    scaled = torch.where(wave > low_wave, inv / factor, inv)
    smooth = (old / wave - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wave < high_wave) * ~(wave > low_wave)
    return torch.where(medium, smoothed, scaled)


def llama_forward(cfg, w, idx):
    b, t = idx.shape
    d, h, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // h, cfg["rms_norm_eps"]
    # LlamaRotaryEmbedding: angles as the float32 product of position and
    # frequency; cos and sin taken in float64 here (transformers takes them in
    # float32: within 1e-7).
    freqs = torch.outer(torch.arange(t, dtype=torch.float32), llama_inv_freq(cfg))
    emb = torch.cat((freqs, freqs), dim=-1).to(torch.float64)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(z):
        return torch.cat((-z[..., hd // 2:], z[..., :hd // 2]), dim=-1)

    def rms(z, weight):
        return weight * (z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps))

    x = w["model.embed_tokens.weight"][idx]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q = (a @ w[p + "self_attn.q_proj.weight"].T).view(b, t, h, hd).transpose(1, 2)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).view(b, t, kv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # apply_rotary_pos_emb
        k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)  # repeat_kv
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hd)).masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = m @ w[p + "mlp.gate_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def write_fixture(d, cfg, w, dtype, fwd, extra=None):
    batch = torch.tensor([[1, 4, 9, 16, 25, 36, 49, 0], [7, 7, 3, 2, 11, 13, 17, 19]])
    prompt = [3, 1, 4, 1, 5]
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), {**w, **(extra or {})}, dtype)
    # The reference runs in float64 on the weights as stored.
    ws = {k: (v.to(torch.bfloat16) if dtype == "BF16" else v.to(torch.float32)).to(torch.float64) for k, v in w.items()}
    with torch.no_grad():
        logits = fwd(ws, batch)
        seq = list(prompt)
        for _ in range(20):
            seq.append(fwd(ws, torch.tensor([seq]))[0, -1].argmax().item())
    ref = {"batch": batch.tolist(), "logits": logits.flatten().tolist(), "prompt": prompt, "greedy": seq[len(prompt):]}
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)


def main():
    for name, cfg, dtypes, seed in (("llama", LLAMA, ("F32", "BF16"), 1), ("llama3", LLAMA3, ("F32",), 2)):
        w = llama_weights(cfg, seed)
        for dtype in dtypes:
            write_fixture(os.path.join(OUT, name + "-" + dtype.lower()), cfg, w, dtype, lambda ws, idx: llama_forward(cfg, ws, idx))
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
