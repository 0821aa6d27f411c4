#!/usr/bin/env python3
"""PyTorch side of scripts/bench-mlp-step.sh: one FP32 training step of an MLP 784-1024-1024-10 at
batch 128 (nn.Sequential Linear-ReLU-Linear-ReLU-Linear, CrossEntropyLoss, SGD), random data, on the
CPU. Times the median of --steps steps after --warmup steps at each thread count and prints one line
per count plus a last line `best_ms <ms> threads <n>`."""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    sys.exit("bench_mlp_step.py: PyTorch is missing; install Debian's build with\n"
             "  apt-get update && apt-get install -y python3-torch libopenblas0-pthread\n"
             "and run this script with /usr/bin/python3")


def bench(threads, steps, warmup, batch, widths):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, widths[0])
    y = torch.randint(0, widths[-1], (batch,))

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # waits for the step, as the Go side's Download does

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    widths = [784, 1024, 1024, 10]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads by default, "
          f"BLAS: {'openblas' if 'openblas' in torch.__config__.show().lower() else 'see torch.__config__.show()'}")
    best = None
    for t in [int(s) for s in args.threads.split(",")]:
        ms = bench(t, args.steps, args.warmup, args.batch, widths)
        print(f"threads {t}: median {ms:.2f} ms/step")
        if best is None or ms < best[0]:
            best = (ms, t)
    print(f"best_ms {best[0]:.3f} threads {best[1]}")


if __name__ == "__main__":
    main()
