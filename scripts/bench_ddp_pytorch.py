#!/usr/bin/env python3
"""PyTorch DDP on GPT-2 small: the like-for-like anchor for goddp's GPU data-parallel path
(scripts/bench-gpu-ddp.sh runs both in one call on the GPU host).

Run under torchrun; every rank uses GPU LOCAL_RANK % device_count, so two processes on a host with
one GPU share it (NCCL refuses two ranks on one GPU, hence the gloo backend by default). Same model
and step as scripts/bench_gpt2_pytorch.py (imported from it): autocast fp16 + GradScaler, fused
AdamW, SDPA attention, random tokens; DistributedDataParallel with 25 MB buckets and gradients as
bucket views; --hook fp16 registers PyTorch's fp16 compression hook (gradients cast to half and
divided by the world size before the all-reduce, as goddp's f16 wire does).

Rank 0 prints, after the timed steps (median step time, slowest rank):

    RESULT pytorch-ddp-<backend>-<hook> <world> <batch per rank> <T> <total tokens/s> <step ms>

Usage: torchrun --nproc-per-node 2 scripts/bench_ddp_pytorch.py [--batch 8] [--steps 20]
       [--warmup 5] [--backend gloo] [--hook none|fp16]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpt2_pytorch import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--hook", default="none", choices=["none", "fp16"])
    a = ap.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = "cuda"
    torch.manual_seed(0)
    model = GPT().to(dev)
    ddp = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)
    if a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    g = torch.Generator(device=dev)
    g.manual_seed(1 + rank)
    T = 1024
    x = torch.randint(0, 50257, (a.batch, T), device=dev, generator=g)
    y = torch.randint(0, 50257, (a.batch, T), device=dev, generator=g)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = ddp(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1000)
    ms = torch.tensor([statistics.median(times)])
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    ms = ms.item()
    name = f"pytorch-ddp-{a.backend}-{a.hook}"
    if rank == 0:
        tps = world * a.batch * T / (ms / 1000)
        print(f"{name}: torch {torch.__version__} on {torch.cuda.get_device_name()}, {world} processes", flush=True)
        print(f"RESULT {name} {world} {a.batch} {T} {tps:.0f} {ms:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
