#!/usr/bin/env python3
"""stage3_metrics.py — reads ddptrain's JSON-lines metrics (--metrics FILE; ddplaunch writes rank r's
as FILE's name with .rankR before the extension) for the GPU stage-3 scripts (scripts/gpu-stage3.sh,
bench-gpu-vs-pytorch.sh DTYPE=bf16, bench-gpu-ddp.sh ROWS=shard|device). Standard library only.

  stage3_metrics.py step FILE            median step_ms of the step lines after the first (warm-up)
  stage3_metrics.py summary FILE KEY     one field of the summary line ("" when absent)
  stage3_metrics.py ranks FILE           one line per rank: rank, peak GiB, param_sha256[:16], then
                                         IDENTICAL or DIFFER over all ranks' param_sha256
  stage3_metrics.py rankrow FILE         the same on one line: peaks=GiB,GiB,... max=GiB sha=IDENTICAL|DIFFER
  stage3_metrics.py loss A B [LAST]      the two runs' loss curves at the steps both logged: the
                                         largest relative difference, and the mean of the LAST
                                         (default 5) logged losses of each and their relative
                                         difference
  stage3_metrics.py report LOG           from --memory-report's block in LOG: peak, static
                                         (peak - input batch - activations), activations, GiB
A missing or empty file is an error naming it (exit 1), never a made-up number.
"""
import json
import os
import statistics
import sys

GiB = float(1 << 30)


def lines(path, event):
    if not os.path.exists(path):
        sys.exit(f"stage3_metrics: {path}: no such file")
    out = []
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if not ln.startswith("{"):
                continue
            try:
                d = json.loads(ln)
            except json.JSONDecodeError:
                continue
            if d.get("event") == event:
                out.append(d)
    return out


def rank_files(path):
    """path and its .rankN siblings (ddplaunch's naming), in rank order."""
    stem, ext = os.path.splitext(path)
    files, r = [path], 1
    while os.path.exists(f"{stem}.rank{r}{ext}"):
        files.append(f"{stem}.rank{r}{ext}")
        r += 1
    return files


def median_step(path):
    ms = [d["step_ms"] for d in lines(path, "step")[1:] if d.get("step_ms")]
    if not ms:
        sys.exit(f"stage3_metrics: {path}: no step lines after the first with step_ms")
    return statistics.median(ms)


def summary(path):
    s = lines(path, "summary")
    if not s:
        sys.exit(f"stage3_metrics: {path}: no summary line (the run did not finish)")
    return s[-1]


def loss_curve(path):
    return {d["step"]: d["loss"] for d in lines(path, "step")}


def cmd_loss(a, b, last=5):
    ca, cb = loss_curve(a), loss_curve(b)
    common = sorted(set(ca) & set(cb))
    if not common:
        sys.exit(f"stage3_metrics: {a} and {b}: no step logged by both")
    worst, at = 0.0, common[0]
    for s in common:
        r = abs(ca[s] - cb[s]) / max(abs(cb[s]), 1e-12)
        if r > worst:
            worst, at = r, s
    ma = statistics.fmean(ca[s] for s in common[-last:])
    mb = statistics.fmean(cb[s] for s in common[-last:])
    return worst, at, ma, mb, abs(ma - mb) / max(abs(mb), 1e-12), len(common)


def cmd_report(path):
    vals = {}
    if not os.path.exists(path):
        sys.exit(f"stage3_metrics: {path}: no such file")
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    inside = False
    with open(path) as f:
        for ln in f:
            if "memory report (" in ln:
                inside, vals = True, {}
                continue
            if not inside:
                continue
            for key in ("peak allocated", "input batch", "activations + workspace at peak"):
                i = ln.find(key)
                if i >= 0:
                    w = ln[i + len(key):].split()
                    if len(w) >= 2 and w[1] in units:
                        vals[key] = float(w[0]) * units[w[1]]
            if "peak allocated" in vals and "activations + workspace at peak" in vals and "input batch" in vals:
                inside = False
    if len(vals) < 3:
        sys.exit(f"stage3_metrics: {path}: no complete memory report (run with --memory-report)")
    peak, act = vals["peak allocated"], vals["activations + workspace at peak"]
    return peak, peak - act - vals["input batch"], act


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, path = argv[1], argv[2]
    if cmd == "step":
        print(f"{median_step(path):.2f}")
    elif cmd == "summary":
        if len(argv) != 4:
            sys.exit("usage: stage3_metrics.py summary FILE KEY")
        v = summary(path).get(argv[3], "")
        print(v)
    elif cmd == "ranks":
        shas = []
        for r, f in enumerate(rank_files(path)):
            s = summary(f)
            shas.append(s.get("param_sha256", ""))
            print(f"rank {r} peak {s.get('peak_memory_bytes', 0) / GiB:.2f} GiB param_sha256 {shas[-1][:16]}")
        same = len(shas) > 1 and all(shas) and len(set(shas)) == 1
        print(f"{len(shas)} ranks: {'IDENTICAL' if same else 'DIFFER'}")
    elif cmd == "rankrow":
        peaks, shas = [], []
        for f in rank_files(path):
            s = summary(f)
            peaks.append(s.get("peak_memory_bytes", 0) / GiB)
            shas.append(s.get("param_sha256", ""))
        same = len(shas) > 1 and all(shas) and len(set(shas)) == 1
        print(f"peaks={','.join(f'{p:.2f}' for p in peaks)} max={max(peaks):.2f} sha={'IDENTICAL' if same else 'DIFFER'}")
    elif cmd == "loss":
        if len(argv) < 4:
            sys.exit("usage: stage3_metrics.py loss A B [LAST]")
        last = int(argv[4]) if len(argv) > 4 else 5
        worst, at, ma, mb, rel, n = cmd_loss(path, argv[3], last)
        print(f"steps {n} max_rel {worst:.2e} at_step {at} mean_last_a {ma:.4f} mean_last_b {mb:.4f} rel {rel:.4f}")
    elif cmd == "report":
        peak, static, act = cmd_report(path)
        print(f"peak {peak / GiB:.2f} static {static / GiB:.2f} activations {act / GiB:.2f}")
    else:
        sys.exit(f"stage3_metrics: unknown command {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
