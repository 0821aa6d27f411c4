#!/usr/bin/env python3
"""PyTorch's side of scripts/bench-resnet.sh (issue 33 stage 3): torchvision's ResNet-50 trained
with SGD (momentum 0.9, weight decay 1e-4) on synthetic 224×224 batches of 1000 classes,
channels_last, in fp32 or AMP (autocast fp16 + GradScaler), eager or torch.compile; with
--ckpt every residual stage (layer1..layer4) is recomputed in backward
(torch.utils.checkpoint, use_reentrant=False). Prints lines

    STEP <name> <mode> <batch> <images/s> <step ms> <peak allocated GiB> <peak reserved GiB>
    MAXBATCH <name> <mode> <batch> <trials>

where name is pytorch or pytorch-compile and mode fp32, amp or amp+ckpt. STEP: the median of
--steps timed steps after 3 warm-up steps (each step ends with loss.item(), as goddp's does with its
loss read back). MAXBATCH: the largest batch whose two full steps run under --budget-gib, found by
doubling from 1 then bisection (worker/autobatch.go's rule); the budget is
torch.cuda.set_per_process_memory_fraction, which caps what the caching allocator reserves (it
frees its cache and retries before raising OOM) — goddp's train.memory_budget means the same
since issue 33 (tensor.Pool).

Usage: bench_resnet_pytorch.py [--batch 64,128] [--modes fp32,amp] [--steps 20] [--compile]
       [--maxbatch fp32,amp,amp+ckpt] [--budget-gib 16] [--limit 1024]
"""
import argparse
import gc
import statistics
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt
import torchvision

from bench_memory_pytorch import search  # doubling then bisection, as worker/autobatch.go


class Runner:
    def __init__(self, mode, compile_):
        torch.manual_seed(0)
        self.amp = mode.startswith("amp")
        self.ckpt = mode.endswith("ckpt")
        m = torchvision.models.resnet50(num_classes=1000)
        self.model = m.cuda().to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)
        self.fwd = torch.compile(self.forward) if compile_ else self.forward

    def forward(self, x):
        m = self.model
        x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
        for stage in (m.layer1, m.layer2, m.layer3, m.layer4):
            x = ckpt.checkpoint(stage, x, use_reentrant=False) if self.ckpt else stage(x)
        return m.fc(torch.flatten(m.avgpool(x), 1))

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.amp):
            loss = F.cross_entropy(self.fwd(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.item()

    def batch(self, B):
        x = torch.randn(B, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (B,), device="cuda")
        return x, y

    def fits(self, B):
        """Two full steps at batch B (the first also creates the momentum buffers); False on OOM."""
        x = y = None
        try:
            x, y = self.batch(B)
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


def timed(mode, B, steps, compile_):
    r = Runner(mode, compile_)
    x, y = r.batch(B)
    for _ in range(3):
        r.step(x, y)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        r.step(x, y)
        times.append((time.perf_counter() - t0) * 1000)
    peak, reserved = torch.cuda.max_memory_allocated() / 2**30, torch.cuda.max_memory_reserved() / 2**30
    del x, y
    r.close()
    ms = statistics.median(times)
    return B * 1000 / ms, ms, peak, reserved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="64,128")
    ap.add_argument("--modes", default="fp32,amp,amp+ckpt")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--maxbatch", default="", help="modes to search the largest batch for, e.g. fp32,amp,amp+ckpt")
    ap.add_argument("--budget-gib", type=float, default=16)
    ap.add_argument("--limit", type=int, default=1024)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    name = "pytorch" + ("-compile" if a.compile else "")
    total = torch.cuda.get_device_properties(0).total_memory
    print(f"{name}: torch {torch.__version__}, torchvision {torchvision.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()} on {torch.cuda.get_device_name()}", flush=True)
    for mode in a.modes.split(","):
        for B in (int(b) for b in a.batch.split(",") if b):
            ips, ms, peak, reserved = timed(mode, B, a.steps, a.compile)
            print(f"STEP {name} {mode} {B} {ips:.0f} {ms:.2f} {peak:.2f} {reserved:.2f}", flush=True)
    if a.maxbatch:
        torch.cuda.set_per_process_memory_fraction(a.budget_gib * 2**30 / total)
        for mode in a.maxbatch.split(","):
            r = Runner(mode, a.compile)
            b, tried = search(r.fits, a.limit)
            r.close()
            print(f"MAXBATCH {name} {mode} {b} {' '.join(tried)}", flush=True)


if __name__ == "__main__":
    main()
