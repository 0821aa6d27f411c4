#!/usr/bin/env bash
# bench-memory.sh — the memory toolkit on one GPU, side by side with PyTorch, in one run (issue 6):
#
#   1. GPU tests of the parts this touches (GPT on GPU vs CPU with the chunked loss, OOM).
#   2. The largest micro-batch of GPT-2 small (configs/gpt2-124m.yaml) under a 16 GiB budget, as
#      ddptrain's train.micro_batch: auto finds it (doubling then bisection with real trial steps):
#      FP32, FP16, FP16 + checkpointing (model.checkpoint=blocks); each then trains 3 steps at it
#      with --check-leaks.
#   3. Peak memory and step time at micro-batch 16 without and with checkpointing, and with
#      checkpointing that keeps the attention output (checkpoint_keep_attention) (15 steps, the
#      median of steps 6–15), with the data-loading time per step (data_ms: loader.Next + upload,
#      batches in pinned memory) and a --memory-plot of one step.
#   4. Data loading for MNIST (an MLP, synthetic MNIST-format files: the GPU host has no data).
#   5. PyTorch eager measured the same way (scripts/bench_memory_pytorch.py).
#
# Run on the GPU host from the repository root inside the Go environment, e.g.
#   bash .gpu/run bash scripts/bench-memory.sh
#   BUDGET=16GiB  OUT=dir (default ./out/bench-memory; logs, metrics, plots)  WORK=dir (binaries,
#   data; default /tmp/goddp-bench-memory)  SKIP_TORCH=1  SKIP_TESTS=1
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUDGET=${BUDGET:-16GiB}
OUT=${OUT:-out/bench-memory}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-/tmp/goddp-bench-memory}   # binaries and synthetic data (kept out of OUT)
mkdir -p "$WORK"
t0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - t0)) s] $*"; }

stamp "build"
bash scripts/cuda-env.sh go build -tags cuda -o "$WORK/ddptrain" ./cmd/ddptrain || { echo "build failed"; exit 1; }
bash scripts/cuda-env.sh go build -o "$WORK/ddpbench" ./cmd/ddpbench || true

if [ -z "${SKIP_TESTS:-}" ]; then
  stamp "GPU tests"
  bash scripts/cuda-env.sh go test -count=1 -tags cuda ./model/ ./model/cuda/ ./model/cpu/ -run 'CUDA_gptMatchesCPU|CUDA_gptTrains|CUDA_oom|lossChunks|observer' 2>&1 | tail -5
  bash scripts/cuda-env.sh go test -count=1 -tags cuda ./worker/ -run 'AutoBatch|CheckLeaks|MemoryPlot|MemTimeline' 2>&1 | tail -5
fi

# Data: random text (byte-level, 8 MB: ~7000 windows of 1024) and MNIST-format random images.
head -c 6000000 /dev/urandom | base64 -w 100 > "$WORK/text.txt"
python3 - "$WORK/mnist" <<'EOF'
import os, struct, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
for name, n in (("train", 60000), ("t10k", 10000)):
    with open(f"{d}/{name}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28)); f.write(os.urandom(n * 784))
    with open(f"{d}/{name}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 2049, n)); f.write(bytes(b % 10 for b in os.urandom(n)))
EOF

gpt() { # name, extra args...
  local name=$1; shift
  "$WORK/ddptrain" --device cuda --config configs/gpt2-124m.yaml --set data.kind=text --set data.path="$WORK/text.txt" \
    --set train.eval_batches=1 --set train.log_every=1 --set train.warmup_steps=2 \
    --metrics "$OUT/$name.jsonl" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  grep -h 'micro_batch auto\|memory leak\|out of memory\|Error\|error' "$OUT/$name.log" | head -3
  tail -1 "$OUT/$name.log"
  return $rc
}

for v in "fp32|precision=fp32" "fp16|precision=fp16" "fp16+ckpt|precision=fp16 model.checkpoint=blocks"; do
  name=${v%%|*}; sets=${v#*|}
  stamp "ours: largest micro-batch under $BUDGET, $name"
  args=(); for s in $sets; do args+=(--set "$s"); done
  gpt "auto-${name/+/-}" "${args[@]}" --set train.micro_batch=auto --set train.memory_budget="$BUDGET" --set train.max_steps=3 --check-leaks
done

for v in "none|none" "ckpt|blocks" "ckpt-keep|blocks"; do
  name=${v%%|*}; c=${v#*|}
  stamp "ours: micro-batch 16, checkpoint $c ($name)"
  extra=(); [ "$name" = none ] && extra=(--memory-report --memory-plot "$OUT/memory-b16.png")
  [ "$name" = ckpt ] && extra=(--memory-plot "$OUT/memory-b16-ckpt.png")
  [ "$name" = ckpt-keep ] && extra=(--set model.checkpoint_keep_attention=true)
  gpt "b16-$name" --set train.micro_batch=16 --set model.checkpoint="$c" --set train.max_steps=15 "${extra[@]}"
done
grep -A12 '^memory report' "$OUT/b16-none.log" | head -14

stamp "ours: MNIST MLP data loading"
"$WORK/ddptrain" --device cuda --config configs/mnist-mlp.yaml --set data.path="$WORK/mnist" --set train.max_steps=400 \
  --set train.epochs=0 --set train.log_every=50 --metrics "$OUT/mnist.jsonl" > "$OUT/mnist.log" 2>&1; tail -1 "$OUT/mnist.log"
"$WORK/ddpbench" plot "$OUT/b16-none.jsonl" -o "$OUT/b16-none-metrics.png" || true

if [ -z "${SKIP_TORCH:-}" ]; then
  stamp "PyTorch eager"
  (cd scripts && PYTHONUNBUFFERED=1 python3 bench_memory_pytorch.py --budget-gib "${BUDGET%GiB}" --at-batch 16 --steps 10) 2>&1 | tee "$OUT/pytorch.log"
fi

stamp "summary"
python3 - "$OUT" <<'EOF'
import json, re, statistics, sys, glob, os
out = sys.argv[1]
def lines(p):
    try:
        return [json.loads(l) for l in open(p) if l.strip()]
    except FileNotFoundError:
        return []
print(f"GPT-2 small, T=1024, AdamW, budget {os.environ.get('BUDGET', '16GiB')}: largest micro-batch")
for name in ("fp32", "fp16", "fp16-ckpt"):
    log = open(f"{out}/auto-{name}.log").read() if os.path.exists(f"{out}/auto-{name}.log") else ""
    m = re.search(r'micro_batch auto.*? micro_batch=(\d+).*?trials="([^"]*)"', log)
    steps = [l for l in lines(f"{out}/auto-{name}.jsonl") if l.get("event") == "step"]
    st = f"{statistics.median([s['step_ms'] for s in steps]):.0f} ms/step, peak {steps[-1]['mem_peak_bytes']/2**30:.2f} GiB" if steps else "no steps"
    print(f"  ours {name:10s} {m.group(1) if m else '?':>4s}   ({st}; trials {m.group(2) if m else '-'})")
for l in open(f"{out}/pytorch.log") if os.path.exists(f"{out}/pytorch.log") else []:
    if l.startswith("MAXBATCH"):
        p = l.split()
        print(f"  {p[1]} {p[2]:10s} {p[3]:>4s}   (trials {' '.join(p[4:])})")
print("micro-batch 16: median step (steps 6-15), peak, data time per step")
base_ms = None
for name in ("none", "ckpt", "ckpt-keep"):
    steps = [l for l in lines(f"{out}/b16-{name}.jsonl") if l.get("event") == "step"][5:]
    if steps:
        ms = statistics.median(s["step_ms"] for s in steps)
        dm = statistics.median(s["data_ms"] for s in steps)
        base_ms = base_ms or ms
        over = f"{100*(ms/base_ms-1):+.1f}%" if name != "none" else ""
        print(f"  ours checkpoint={name:9s} {ms:7.1f} ms {over:7s} peak {steps[-1]['mem_peak_bytes']/2**30:6.2f} GiB  data {dm:.3f} ms/step ({100*dm/ms:.2f}%)")
for l in open(f"{out}/pytorch.log") if os.path.exists(f"{out}/pytorch.log") else []:
    if l.startswith("STEP"):
        p = l.split()
        print(f"  {p[1]} {p[2]:10s} {float(p[4]):7.1f} ms  peak {float(p[5]):6.2f} GiB")
steps = [l for l in lines(f"{out}/mnist.jsonl") if l.get("event") == "step"][1:]
if steps:
    ms = statistics.median(s["step_ms"] for s in steps); dm = statistics.median(s["data_ms"] for s in steps)
    print(f"MNIST MLP micro-batch 128: {ms:.3f} ms/step, data {dm:.3f} ms/step ({100*dm/ms:.1f}%)")
EOF
ls -la "$OUT"/*.png 2>/dev/null
stamp "done"
