#!/usr/bin/env python3
"""The largest micro-batch of GPT-2 small that PyTorch fits under a memory budget, found the way
goddp's train.micro_batch: auto finds its own (worker/autobatch.go): doubling from 1 until a trial
step runs out of memory, then bisection; every trial is a full training step (forward, backward,
GradScaler, fused AdamW) at that batch. The budget is torch.cuda.set_per_process_memory_fraction
(budget / card memory), which caps what the caching allocator reserves; goddp's budget caps what
its allocator hands out (SetLimit), a slightly looser rule since fragmentation is not counted.

The model is scripts/bench_gpt2_pytorch.py's GPT (12 layers, width 768, T 1024, V 50304, tied,
SDPA attention). Modes: fp32, amp (autocast fp16 + GradScaler), amp+ckpt
(torch.utils.checkpoint around every block). Also peak memory and median step time at --at-batch
with and without checkpointing. Prints lines

    MAXBATCH pytorch <mode> <batch> <trials>
    STEP pytorch <mode> <batch> <step ms> <peak GiB>

Usage: bench_memory_pytorch.py [--budget-gib 16] [--modes fp32,amp,amp+ckpt] [--at-batch 16]
       [--limit 512] [--steps 10] [--compile]
"""
import argparse
import gc
import statistics
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

from bench_gpt2_pytorch import GPT


class CkptGPT(GPT):
    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = ckpt.checkpoint(b, x, use_reentrant=False)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


class Runner:
    def __init__(self, mode, compile_):
        torch.manual_seed(0)
        self.amp = mode.startswith("amp")
        self.model = (CkptGPT() if mode.endswith("ckpt") else GPT()).cuda()
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        nodecay = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                     lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.fwd = torch.compile(self.model) if compile_ else self.model

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.amp):
            loss = self.fwd(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.item()

    def fits(self, B):
        """Two full steps at batch B (the first also creates AdamW's state); False on OOM."""
        x = y = None
        try:
            x = torch.randint(0, 50257, (B, 1024), device="cuda")
            y = torch.randint(0, 50257, (B, 1024), device="cuda")
            self.step(x, y)
            self.step(x, y)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            del x, y
            self.opt.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()

    def close(self):
        del self.model, self.opt, self.scaler, self.fwd
        gc.collect()
        torch.cuda.empty_cache()


def search(fits, limit):
    """Largest b in [1, limit] with fits(b): doubling, then bisection (as worker/autobatch.go)."""
    good, bad, tried = 0, limit + 1, []
    b = 1
    while True:
        b = min(b, limit)
        ok = fits(b)
        tried.append(f"{b}:{'fits' if ok else 'OOM'}")
        if not ok:
            bad = b
            break
        good = b
        if b == limit:
            return b, tried
        b *= 2
    while bad - good > 1:
        mid = good + (bad - good) // 2
        ok = fits(mid)
        tried.append(f"{mid}:{'fits' if ok else 'OOM'}")
        if ok:
            good = mid
        else:
            bad = mid
    return good, tried


def timed(mode, B, steps, compile_):
    r = Runner(mode, compile_)
    x = torch.randint(0, 50257, (B, 1024), device="cuda")
    y = torch.randint(0, 50257, (B, 1024), device="cuda")
    for _ in range(3):
        r.step(x, y)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        r.step(x, y)
        times.append((time.perf_counter() - t0) * 1000)
    peak = torch.cuda.max_memory_allocated() / 2**30
    del x, y
    r.close()
    return statistics.median(times), peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-gib", type=float, default=16)
    ap.add_argument("--modes", default="fp32,amp,amp+ckpt")
    ap.add_argument("--at-batch", type=int, default=16)
    ap.add_argument("--limit", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    name = "pytorch" + ("-compile" if a.compile else "")
    total = torch.cuda.get_device_properties(0).total_memory
    print(f"{name}: torch {torch.__version__} on {torch.cuda.get_device_name()}, "
          f"budget {a.budget_gib} GiB of {total / 2**30:.1f}", flush=True)
    if a.at_batch > 0:  # the timed runs first, without the budget (as the reference numbers)
        for mode in ("amp", "amp+ckpt"):
            ms, peak = timed(mode, a.at_batch, a.steps, a.compile)
            print(f"STEP {name} {mode} {a.at_batch} {ms:.2f} {peak:.2f}", flush=True)
    torch.cuda.set_per_process_memory_fraction(a.budget_gib * 2**30 / total)
    for mode in a.modes.split(","):
        r = Runner(mode, a.compile)
        b, tried = search(r.fits, a.limit)
        r.close()
        print(f"MAXBATCH {name} {mode} {b} {' '.join(tried)}", flush=True)


if __name__ == "__main__":
    main()
