#!/usr/bin/env python3
"""GPT-2 small (124M) training-step benchmark in PyTorch eager: the reference goddp's CUDA device is
held against (scripts/bench-gpu-vs-pytorch.sh runs both in one call on the GPU host).

Same model and step as model/cuda_gpt_test.go's TestCUDA_gpt2Bench: 12 layers, width 768, 12 heads,
context 1024, vocabulary 50304, tied embeddings, pre-LN blocks with tanh-GELU, no dropout;
autocast fp16 with GradScaler, fused AdamW (betas 0.9/0.95, weight decay 0.1), attention through
scaled_dot_product_attention (causal). Random tokens. Prints one line per batch size:

    RESULT pytorch <batch> <T> <tokens/s> <step ms> <peak GiB>

With --dtype bf16: autocast bf16, no GradScaler (issue 32's comparison); the line's name is then
pytorch-bf16 (pytorch-bf16-compile with --compile).

Usage: bench_gpt2_pytorch.py [--batch 16,8] [--steps 20] [--naive-attn] [--compile] [--dtype fp16|bf16]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, naive):
        super().__init__()
        self.H, self.naive = H, naive
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.naive:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, device=x.device, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L=12, C=768, H=12, T=1024, V=50304, naive=False):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, H, naive) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def bench(B, T, steps, naive, compile_, dtype="fp16"):
    torch.manual_seed(0)
    dev = "cuda"
    model = GPT(naive=naive).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    # bf16 autocast needs no loss scaling (PyTorch's recipe): the scaler is off and its calls pass through.
    scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "fp16"))
    amp_dtype = torch.float16 if dtype == "fp16" else torch.bfloat16
    fwd = torch.compile(model) if compile_ else model
    x = torch.randint(0, 50257, (B, T), device=dev)
    y = torch.randint(0, 50257, (B, T), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype):
            loss = fwd(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()  # .item() waits for the step
        times.append((time.perf_counter() - t0) * 1000)
    ms = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() / 2**30
    del model, opt, scaler
    torch.cuda.empty_cache()
    return B * T / (ms / 1000), ms, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="16,8")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--naive-attn", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16",
                    help="autocast dtype: fp16 with GradScaler (default) or bf16 without loss scaling")
    a = ap.parse_args()
    name = "pytorch" + ("-bf16" if a.dtype == "bf16" else "") + ("-naive" if a.naive_attn else "") + ("-compile" if a.compile else "")
    print(f"{name}: torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for b in a.batch.split(","):
        tps, ms, peak = bench(int(b), 1024, a.steps, a.naive_attn, a.compile, a.dtype)
        print(f"RESULT {name} {b} 1024 {tps:.0f} {ms:.2f} {peak:.2f}", flush=True)


if __name__ == "__main__":
    main()
