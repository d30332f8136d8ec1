"""Plain PyTorch reference for memfit's 8B QLoRA step (issue #45, item 6):
a Llama-shaped decoder written out here (RMSNorm, rotary embeddings with
theta 500000, grouped-query attention through SDPA, SwiGLU MLP, untied
head), its base weights random bf16 and frozen, LoRA adapters of one rank
on all seven Linear kinds of every block (q, k, v, o, gate, up, down),
trained with AdamW. No quantization: the base stays bf16, so this is the
"plain bf16 LoRA" column beside memfit's nf4 one. scripts/gpu-8b.sh runs
it in the same GPU call as memfit's step.

    python3 scripts/torch_lora_ref.py                      # the 8B shape, context 8192, on cuda
    python3 scripts/torch_lora_ref.py --device cpu --layers 2 --width 64 --heads 4 --kv-heads 2 \
        --hidden 128 --vocab 256 --context 64 --rank 4 --steps 3 --warmup 1

Precision is PEFT's under torch.autocast: base weights (embedding, norms,
projections, head) bf16 with requires_grad False; adapters A and B f32
(A Kaiming-uniform as PEFT draws it, B zeros, scale alpha/rank), their
products run in bf16 by autocast; AdamW's state f32. The logits are bf16
and the loss is cross-entropy over the vocabulary in f32 (logits.float()),
over every position of every sequence (next-token targets). With
--checkpoint every each block is recomputed in backward
(torch.utils.checkpoint, use_reentrant=False). AdamW has weight decay 0
and lr 3e-4: the update of memfit's default -optim adam at -wd 0.

Weights are drawn where they live (torch.empty(..., device, dtype)
.normal_(0, 0.02)), so building the 8B shape on a GPU takes seconds. The
data is one fixed batch of random tokens, trained on at every step: the
loss falls as the adapters learn it.

Prints ONE JSON line: device, tokens_per_s and step_s (medians over the
steps after --warmup; CUDA steps timed between torch.cuda.synchronize()
calls, CPU steps by the wall clock), peak_bytes
(torch.cuda.max_memory_allocated over the whole run, model included;
null on the CPU), shape, the attention path taken, the first and last
losses and the seconds the model took to build. It checks, after the
first backward, that gradients reached every adapter and nothing else,
and exits non-zero if not or if a loss is not finite.
"""
import argparse, json, math, platform, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

BF16 = torch.bfloat16


def frozen(shape, device, std=0.02):
    """A random bf16 base weight drawn on its device, never trained."""
    w = torch.empty(*shape, device=device, dtype=BF16).normal_(0.0, std)
    return nn.Parameter(w, requires_grad=False)


class LoRALinear(nn.Module):
    """y = x W^T + (x A^T B^T) * alpha/r, W frozen bf16, A and B trained in f32."""

    def __init__(self, din, dout, rank, alpha, device):
        super().__init__()
        self.weight = frozen((dout, din), device)
        self.lora_A = nn.Parameter(torch.empty(rank, din, device=device, dtype=torch.float32))
        self.lora_B = nn.Parameter(torch.zeros(dout, rank, device=device, dtype=torch.float32))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # PEFT's default
        self.scale = alpha / rank

    def forward(self, x):
        return F.linear(x, self.weight) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale


class RMSNorm(nn.Module):
    def __init__(self, d, device, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=BF16), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        # As Hugging Face's Llama: the statistics in f32, the result in x's dtype.
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope_tables(T, head_dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    f = torch.outer(torch.arange(T, device=device, dtype=torch.float32), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos(), emb.sin()  # (T, head_dim), f32


def attention_path():
    """The attention this torch offers: SDPA with enable_gqa (2.5+), SDPA
    with the key/value heads repeated, or (torch before 2.0, CPU tests
    only) the composition."""
    if not hasattr(F, "scaled_dot_product_attention"):
        return "manual"
    q = torch.zeros(1, 4, 2, 8)
    kv = torch.zeros(1, 2, 2, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        return "sdpa+enable_gqa"
    except (TypeError, RuntimeError):
        return "sdpa+repeat_interleave"


class Block(nn.Module):
    def __init__(self, a, device, attn):
        super().__init__()
        d, hd = a.width, a.width // a.heads
        self.h, self.kvh, self.hd, self.attn = a.heads, a.kv_heads, hd, attn
        lin = lambda i, o: LoRALinear(i, o, a.rank, a.alpha, device)
        self.input_norm, self.post_norm = RMSNorm(d, device), RMSNorm(d, device)
        self.q, self.k, self.v = lin(d, a.heads * hd), lin(d, a.kv_heads * hd), lin(d, a.kv_heads * hd)
        self.o = lin(a.heads * hd, d)
        self.gate, self.up, self.down = lin(d, a.hidden), lin(d, a.hidden), lin(a.hidden, d)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_norm(x)
        q = self.q(h).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(B, T, self.kvh, self.hd).transpose(1, 2)
        v = self.v(h).view(B, T, self.kvh, self.hd).transpose(1, 2)
        c, s = cos.to(q.dtype), sin.to(q.dtype)
        q, k = q * c + rotate_half(q) * s, k * c + rotate_half(k) * s
        rep = self.h // self.kvh
        if self.attn == "sdpa+enable_gqa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if rep > 1:
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            if self.attn == "sdpa+repeat_interleave":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)).float() / math.sqrt(self.hd)
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                o = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1).to(v.dtype) @ v
        x = x + self.o(o.transpose(1, 2).reshape(B, T, self.h * self.hd))
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, a, device, attn):
        super().__init__()
        self.embed = frozen((a.vocab, a.width), device)
        self.blocks = nn.ModuleList(Block(a, device, attn) for _ in range(a.layers))
        self.norm = RMSNorm(a.width, device)
        self.head = frozen((a.vocab, a.width), device)  # untied
        self.checkpoint = a.checkpoint == "every"
        self.hd, self.theta = a.width // a.heads, a.rope_theta

    def forward(self, idx, targets):
        cos, sin = rope_tables(idx.shape[1], self.hd, self.theta, idx.device)
        x = F.embedding(idx, self.embed)
        for b in self.blocks:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(b, x, cos, sin, use_reentrant=False)
            else:
                x = b(x, cos, sin)
        logits = F.linear(self.norm(x), self.head)  # bf16 under autocast
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def device_name(dev):
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--hidden", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--alpha", type=float, default=0.0, help="LoRA alpha (0: the rank, as memfit's -lora-alpha 0)")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--steps", type=int, default=4, help="steps in all, --warmup included")
    p.add_argument("--warmup", type=int, default=1, help="first steps left out of the medians")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--checkpoint", choices=("every", "off"), default="every")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    a.alpha = a.alpha or float(a.rank)
    if a.width % a.heads or a.heads % a.kv_heads or (a.width // a.heads) % 2:
        sys.exit("torch_lora_ref.py: --width must split into --heads heads of an even size, --heads into --kv-heads groups")
    if a.steps <= a.warmup:
        sys.exit("torch_lora_ref.py: --steps must exceed --warmup (the medians need a timed step)")

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(a.seed)
    attn = attention_path()
    t0 = time.perf_counter()
    model = Decoder(a, dev, attn)
    idx = torch.randint(0, a.vocab, (a.batch, a.context + 1), device=dev)
    inputs, targets = idx[:, :-1], idx[:, 1:]
    if cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0

    adapters = [(n, q) for n, q in model.named_parameters() if q.requires_grad]
    opt = torch.optim.AdamW([q for _, q in adapters], lr=a.lr, weight_decay=0.0)
    times, losses = [], []
    for i in range(a.steps):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=BF16):
            loss = model(inputs, targets)
        loss.backward()
        if i == 0:
            check_gradients(model, a.layers)
        opt.step()
        losses.append(loss.item())  # synchronizes
        if cuda:
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t)
        if not math.isfinite(losses[-1]):
            sys.exit("torch_lora_ref.py: step %d: loss %r" % (i + 1, losses[-1]))

    step_s = statistics.median(times)
    print(json.dumps(dict(
        device=device_name(dev),
        tokens_per_s=a.batch * a.context / step_s,
        step_s=step_s,
        peak_bytes=torch.cuda.max_memory_allocated(dev) if cuda else None,
        shape=dict(layers=a.layers, width=a.width, heads=a.heads, kv_heads=a.kv_heads, hidden=a.hidden,
                   vocab=a.vocab, context=a.context, batch=a.batch, lora_rank=a.rank, lora_alpha=a.alpha,
                   lora_targets="q,k,v,o,gate,up,down", checkpoint=a.checkpoint, base="bf16",
                   adapters="f32", autocast="bf16"),
        attention=attn,
        params=sum(q.numel() for q in model.parameters()), trainable_params=sum(q.numel() for _, q in adapters),
        loss_first=losses[0], loss_last=losses[-1],
        timed_steps=len(times), step_times_s=times, build_s=build_s,
        torch=torch.__version__,
    )), flush=True)


def check_gradients(model, layers):
    """Gradients must reach every adapter and nothing else (A's are zeros
    while B is, but they are computed)."""
    bad = [n for n, q in model.named_parameters() if q.grad is not None and "lora_" not in n]
    missing = [n for n, q in model.named_parameters() if "lora_" in n and q.grad is None]
    n_b = sum(1 for n, _ in model.named_parameters() if n.endswith("lora_B"))
    if bad or missing or n_b != 7 * layers:
        sys.exit("torch_lora_ref.py: gradients on frozen weights %s, none on adapters %s, %d adapters for %d blocks" % (
            bad[:5], missing[:5], n_b, layers))


if __name__ == "__main__":
    main()
