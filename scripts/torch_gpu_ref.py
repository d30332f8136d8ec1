"""PyTorch reference for cmd/stepbench -device cuda: the same MLP and GPT
workloads (shapes, Adam, bf16 autocast) timed on one GPU in eager mode.

    python3 scripts/torch_gpu_ref.py [--steps 20] [--configs mlp_fp32,gpt_fp32,gpt_bf16]

Prints one JSON line per configuration: median step time in ms, and the
peak of torch.cuda.max_memory_allocated over the timed steps. TF32 stays
off, as in memfit's f32 GEMM.
"""
import argparse, json, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        shape = (B, T, self.h, C // self.h)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~mask, float('-inf')), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=256, T=256, layers=6, heads=6, d=384):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def run(cfg, steps, warm=3):
    torch.manual_seed(0)
    dev = 'cuda'
    if cfg.startswith('mlp'):
        model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                              nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
        x, y = torch.randn(256, 784, device=dev), torch.randint(0, 10, (256,), device=dev)
        lr = 1e-3
    else:
        model = GPT().to(dev)
        x = torch.randint(0, 256, (16, 256), device=dev)
        y = torch.randint(0, 256, (16, 256), device=dev)
        lr = 3e-4
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    bf16 = cfg.endswith('bf16')
    times = []
    for i in range(warm + steps):
        if i == warm:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
        loss = F.cross_entropy(out.float().reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= warm:
            times.append((time.perf_counter() - t0) * 1000)
    return dict(config=cfg, median_ms=statistics.median(times), timed_steps=steps,
                peak_allocated_bytes=torch.cuda.max_memory_allocated(), final_loss=loss.item(),
                device=torch.cuda.get_device_name(), torch=torch.__version__)


if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--steps', type=int, default=20)
    p.add_argument('--configs', default='mlp_fp32,gpt_fp32,gpt_bf16')
    a = p.parse_args()
    for c in a.configs.split(','):
        print(json.dumps(run(c, a.steps)), flush=True)
