#!/usr/bin/env python3
"""Writes model/half/testdata/bf16_torch.txt: float32 bit patterns and the bfloat16 bits PyTorch
rounds them to (tensor.to(torch.bfloat16), round to nearest even), for half.BF16FromFloat32's test.

Run once with any PyTorch (Debian's python3-torch 1.13 wrote the committed file):

    /usr/bin/python3 scripts/gen_bf16_table.py

The rows cover zeros, ties (even and odd kept bit), the neighbours of ties, f32 subnormals, the
largest finite float32 and bf16 (overflow to Inf), Inf, NaNs of both signs and payloads, and
random bit patterns of every exponent (a fixed seed: the file is reproducible).
"""
import random
import struct
import sys

import torch

OUT = "model/half/testdata/bf16_torch.txt"


def patterns():
    p = [
        0x00000000, 0x80000000,  # ±0
        0x3F800000, 0xBF800000,  # ±1
        0x3F808000,  # 1 + 2^-8: a tie, kept bit even -> rounds down
        0x3F818000,  # a tie, kept bit odd -> rounds up
        0x3F807FFF, 0x3F808001, 0x3F817FFF, 0x3F818001,  # around the ties
        0x00000001, 0x80000001,  # smallest subnormals
        0x00008000, 0x00018000,  # subnormal ties
        0x00007FFF, 0x0000FFFF, 0x007FFFFF, 0x807FFFFF,  # subnormals, largest subnormal
        0x00800000, 0x80800000,  # smallest normals
        0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,  # largest bf16, a tie to Inf, max f32
        0xFF7F8000, 0xFF7FFFFF,  # negative overflow
        0x7F800000, 0xFF800000,  # ±Inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000,  # NaNs
        0x40490FDB,  # pi
        0x3DCCCCCD,  # 0.1
    ]
    rnd = random.Random(32)
    for e in range(256):  # every exponent, random mantissas
        for _ in range(8):
            p.append((rnd.getrandbits(1) << 31) | (e << 23) | rnd.getrandbits(23))
    for _ in range(2000):  # ties and their neighbours at random
        u = rnd.getrandbits(32) & 0xFFFF0000 | 0x8000
        p.extend([u, u - 1, u + 1])
    for _ in range(2000):
        p.append(rnd.getrandbits(32))
    return p


def main():
    p = patterns()
    ints = torch.tensor([struct.unpack("<i", struct.pack("<I", u))[0] for u in p], dtype=torch.int32)
    b = ints.view(torch.float32).to(torch.bfloat16).view(torch.int16).tolist()
    with open(OUT, "w") as f:
        f.write("# float32 bits -> torch %s bfloat16 bits (scripts/gen_bf16_table.py)\n" % torch.__version__)
        for u, h in zip(p, b):
            f.write("%08x %04x\n" % (u, h & 0xFFFF))
    print("wrote %d rows to %s" % (len(p), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
