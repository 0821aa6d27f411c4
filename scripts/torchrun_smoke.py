#!/usr/bin/env python3
"""torchrun drop-in smoke test: one all_reduce over gloo, set up from the environment alone.

Run it under either launcher, which must give the same answer:

    torchrun  --nproc_per_node 2 --standalone scripts/torchrun_smoke.py
    ddplaunch --nproc_per_node 2 --standalone scripts/torchrun_smoke.py

Each rank contributes rank + 1, so every rank must end with 1 + 2 + ... + WORLD_SIZE. It prints
one line per rank (cmd/ddplaunch's TestDdplaunch_torchGloo reads them) and exits 1 on a wrong sum.
"""
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    # env:// reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, as under torchrun.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    want = world * (world + 1) / 2
    ok = t.tolist() == [want, 10.0 * want]
    print(
        f"torchrun_smoke: rank {rank} of {world} (local rank {os.environ['LOCAL_RANK']}, "
        f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}, run {os.environ.get('TORCHELASTIC_RUN_ID')}): "
        f"all_reduce sum {t.tolist()} want {[want, 10.0 * want]} {'ok' if ok else 'WRONG'}",
        flush=True,
    )
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
