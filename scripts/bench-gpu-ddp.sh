#!/usr/bin/env bash
# bench-gpu-ddp.sh — data-parallel GPT-2 small on ONE GPU shared by two workers, in one call on the
# GPU host (issue 8; docs/perf-gpu-ddp.md). From the repository root, inside the Go environment:
#   bash .gpu/run bash scripts/bench-gpu-ddp.sh
#
# In order:
#   1. make cuda; the GPU tests of the staged path (go test -tags cuda ./ddp/ ./model/ ./model/cuda/)
#   2. the ring alone: ddpbench all-reduce, 2 processes, f16 wire, one bucket (25 MiB of f32) and
#      the whole gradient (124.5M values: 249 MB of f16 in the ring)
#   3. one process of ours alone (ddplaunch --nproc-per-node gpu: one GPU → one worker)
#   4. ddplaunch --nproc-per-node 2 (both workers on GPU 0), trace + metrics
#   5. PyTorch DDP, gloo, 2 processes on the one GPU, AMP, without and with the fp16 hook
#   6. a table: step time, comm time, hidden fraction, bytes per step, the floor, the ratios
#
#   STEPS=30 (ours)  TSTEPS=15 (PyTorch timed steps)  BATCH=8  OUT=dir (default out/bench-gpu-ddp)
#   SKIP_TESTS=1 to skip step 1's tests.
#   ROWS=shard   instead: the ddp.shard_optimizer rows (issue 31), 2 and 4 workers
#   ROWS=device  instead: the ddp.intra_host device and copies rows and the CUDA IPC all-reduce (issue 34)
#                (both in scripts/bench-gpu-ddp-rows.sh, which says what they measure)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
case ${ROWS:-} in
"") ;;
shard | device) exec bash scripts/bench-gpu-ddp-rows.sh "$ROWS" ;;
*) echo "bench-gpu-ddp.sh: ROWS=$ROWS: want shard or device (or unset)" >&2; exit 2 ;;
esac
STEPS=${STEPS:-30}
TSTEPS=${TSTEPS:-15}
BATCH=${BATCH:-8}
OUT=${OUT:-out/bench-gpu-ddp}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
nvidia-smi -L
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader
t0=$(date +%s)
stamp() { echo "=== $1 ($(( $(date +%s) - t0 )) s)"; }

stamp "build"
make cuda 2>&1 | tail -5 || { echo "BUILD FAILED"; exit 1; }

if [ -z "${SKIP_TESTS:-}" ]; then
  stamp "tests: go test -tags cuda ./ddp/ ./model/ ./model/cuda/"
  timeout 150 bash scripts/cuda-env.sh go test -count=1 -tags cuda ./ddp/ 2>&1 | tail -15 | tee "$OUT/test-ddp.log"
  timeout 150 bash scripts/cuda-env.sh go test -count=1 -tags cuda -run 'CUDA' -v ./model/ ./model/cuda/ 2>&1 | grep -E '^(--- |FAIL|ok|PASS|panic)|staging' | tail -40 | tee "$OUT/test-model.log"
fi

CHANNELS=${CHANNELS:-$(awk '/^ *channels:/ {print $2; exit}' configs/gpt2-124m.yaml)}
CHANNELS=${CHANNELS:-1}
stamp "ring alone: ddpbench allreduce f16, 2 processes, 1 and $CHANNELS channels (the config's)"
timeout 90 ./bin/ddpbench allreduce --nproc 2 --wire f16 --sizes 25M,497903616 --iters 3 --warmup 1 --json 2>&1 | tee "$OUT/ring.jsonl" | grep '^{' || true
if [ "$CHANNELS" -gt 1 ]; then
  timeout 90 ./bin/ddpbench allreduce --nproc 2 --wire f16 --sizes 497903616 --iters 3 --warmup 1 --channels "$CHANNELS" --json 2>&1 | tee "$OUT/ring-channels.jsonl" | grep '^{' || true
fi

common=(--config configs/gpt2-124m.yaml --set data.kind=text --set data.path= --set train.max_steps="$STEPS" --set train.micro_batch="$BATCH"
        --set train.log_every=5 --set train.eval_batches=2)

stamp "ours, one process (--nproc-per-node gpu)"
timeout 120 ./bin/ddplaunch --nproc-per-node gpu "${common[@]}" -- --device cuda \
  --metrics "$OUT/one.jsonl" --trace "$OUT/one.trace.json" 2>&1 | tail -8 | tee "$OUT/one.log"

stamp "ours, 2 processes on GPU 0 (--nproc-per-node 2)"
timeout 120 ./bin/ddplaunch --nproc-per-node 2 "${common[@]}" -- --device cuda --memory-report \
  --metrics "$OUT/ddp.jsonl" --trace "$OUT/ddp.trace.json" > "$OUT/ddp.log" 2>&1
echo "exit $?"
grep -E 'share|staged|pinned|gradients leave|done|error|Error|panic' "$OUT/ddp.log" | cut -c1-400 | head -20

stamp "PyTorch DDP gloo, 2 processes on the one GPU, no hook"
PYTHONUNBUFFERED=1 timeout 120 torchrun --nproc-per-node 2 scripts/bench_ddp_pytorch.py --batch "$BATCH" --steps "$TSTEPS" --hook none 2>&1 | grep -v Warning | tail -3 | tee "$OUT/torch-none.log"
stamp "PyTorch DDP gloo, 2 processes on the one GPU, fp16 compression hook"
PYTHONUNBUFFERED=1 timeout 120 torchrun --nproc-per-node 2 scripts/bench_ddp_pytorch.py --batch "$BATCH" --steps "$TSTEPS" --hook fp16 2>&1 | grep -v Warning | tail -3 | tee "$OUT/torch-fp16.log"
stamp "analysis"

python3 - "$OUT" "$BATCH" <<'EOF'
import json, os, re, statistics, sys
out, B = sys.argv[1], int(sys.argv[2])
T = 1024

def load(path):
    try:
        return json.load(open(path))["traceEvents"]
    except Exception as e:
        print(f"no trace {path}: {e}")
        return []

def steps_of(ev, skip=10):
    """Per optimizer step (after skip warm-up steps): step, fwd, bwd, wait, opt, comm, d2h wait,
    hidden (ms), from the trace's spans."""
    X = [e for e in ev if e.get("ph") == "X"]
    fwd = sorted([e for e in X if e["name"] == "forward"], key=lambda e: e["ts"])
    rows = []
    for i in range(len(fwd) - 1):
        s = fwd[i]["args"]["step"]
        if s < skip:
            continue
        a, b = fwd[i]["ts"], fwd[i + 1]["ts"]
        inside = [e for e in X if a <= e["ts"] < b]
        def dur(name):
            return sum(e["dur"] for e in inside if e["name"] == name) / 1e3
        bw = [e for e in inside if e["name"] == "backward"]
        ar = [e for e in inside if e["name"].startswith("allreduce bucket")]
        hid = 0.0
        for e in ar:
            for k in bw:
                lo, hi = max(e["ts"], k["ts"]), min(e["ts"] + e["dur"], k["ts"] + k["dur"])
                hid += max(0.0, hi - lo)
        comm = sum(e["dur"] for e in ar) / 1e3
        rows.append(dict(step=(b - a) / 1e3, fwd=dur("forward"), bwd=dur("backward"), wait=dur("wait for all-reduce"),
                         opt=dur("optimizer"), comm=comm, d2h=sum(e["dur"] for e in inside if e["name"].startswith("d2h wait")) / 1e3,
                         hidden=hid / 1e3))
    return rows

def med(rows, k):
    return statistics.median(r[k] for r in rows) if rows else float("nan")

def summary(path):
    try:
        for line in open(path):
            d = json.loads(line)
            if d.get("event") == "summary":
                return d
    except Exception:
        pass
    return {}

one = steps_of(load(f"{out}/one.trace.json"))
r0 = steps_of(load(f"{out}/ddp.trace.json"))
r1 = steps_of(load(f"{out}/ddp.trace.rank1.json"))
s0, s1 = summary(f"{out}/ddp.jsonl"), summary(f"{out}/ddp.rank1.jsonl")
sone = summary(f"{out}/one.jsonl")
ring = {}
for line in open(f"{out}/ring.jsonl"):
    if line.startswith("{"):
        d = json.loads(line)
        ring[d["bytes"]] = d
ringc = {}
try:
    for line in open(f"{out}/ring-channels.jsonl"):
        if line.startswith("{"):
            d = json.loads(line)
            ringc[d["bytes"]] = d
except FileNotFoundError:
    pass
torch = {}
for f in ("torch-none.log", "torch-fp16.log"):
    try:
        for line in open(f"{out}/{f}"):
            m = line.split()
            if m and m[0] == "RESULT":
                torch[m[1]] = (float(m[5]), float(m[6]))
    except FileNotFoundError:
        pass

N = 124475904  # GPT-2 small, vocab 50304, tied: parameters = gradient values per step
one_ms = med(one, "step")
step_ms = max(med(r0, "step"), med(r1, "step"))
big = ring.get(4 * N, {})
ring_ms = big.get("sec", float("nan")) * 1e3
bucket = ring.get(25 << 20, {})
bigc = ringc.get(4 * N)
if bigc:  # the engine deals buckets over ddp.channels groups: the floor uses that ring
    ring_ms = bigc["sec"] * 1e3
floor_ms = max(2 * one_ms, ring_ms)
tok = lambda ms, w: w * B * T / (ms / 1e3)
print()
print(f"GPT-2 124M, T={T}, batch {B} per worker, fp16 AMP, AdamW; medians over steps 10..end")
print(f"one worker alone:      step {one_ms:7.1f} ms  (fwd {med(one,'fwd'):.1f}, bwd {med(one,'bwd'):.1f}, opt {med(one,'opt'):.1f})  {tok(one_ms,1):9.0f} tokens/s")
for name, r in (("rank 0", r0), ("rank 1", r1)):
    print(f"2 workers, {name}:     step {med(r,'step'):7.1f} ms  fwd {med(r,'fwd'):.1f}  bwd {med(r,'bwd'):.1f}  "
          f"exposed wait {med(r,'wait'):.1f}  opt {med(r,'opt'):.1f}  comm {med(r,'comm'):.1f} (hidden {med(r,'hidden'):.1f})  d2h waits {med(r,'d2h'):.1f}")
print(f"2 workers:             step {step_ms:7.1f} ms  {tok(step_ms,2):9.0f} tokens/s in total")
print(f"summary: comm_seconds {s0.get('comm_seconds')}, comm_hidden_fraction {s0.get('comm_hidden_fraction')}, "
      f"param_sha256 rank0 {s0.get('param_sha256','?')[:16]} rank1 {s1.get('param_sha256','?')[:16]} "
      f"({'IDENTICAL' if s0.get('param_sha256') and s0.get('param_sha256') == s1.get('param_sha256') else 'DIFFER'})")
print(f"bytes per step per rank: PCIe {4*N/1e6:.0f} MB (f16 down {2*N/1e6:.0f} + up {2*N/1e6:.0f}); ring sends {2*N/1e6:.0f} MB f16 (2(W-1)/W of {2*N/1e6:.0f} MB)")
print(f"ring alone (ddpbench f16, 2 procs): 25 MiB-f32 bucket {bucket.get('sec',float('nan'))*1e3:.1f} ms, "
      f"whole gradient {big.get('sec',float('nan'))*1e3:.1f} ms (wire busbw {big.get('wire_busbw_GBs',float('nan')):.2f} GB/s)"
      + (f"; over {bigc['channels']} channels at once {bigc['sec']*1e3:.1f} ms (wire busbw {bigc['wire_busbw_GBs']:.2f} GB/s)" if bigc else ""))
print(f"floor: max(2 x one worker {2*one_ms:.1f} ms, ring{' over the channels' if bigc else ''} {ring_ms:.1f} ms) = {floor_ms:.1f} ms -> {tok(floor_ms,2):.0f} tokens/s; "
      f"measured step / floor = {step_ms/floor_ms:.2f}")
print()
print(f"{'run':38s} {'step ms':>9s} {'tokens/s':>10s} {'/ ours':>8s}")
print(f"{'goddp 2 workers, staged f16':38s} {step_ms:9.1f} {tok(step_ms,2):10.0f} {1.0:8.2f}")
for k, (tps, ms) in sorted(torch.items()):
    print(f"{k:38s} {ms:9.1f} {tps:10.0f} {tps/tok(step_ms,2):8.2f}")
print(f"{'goddp 1 worker':38s} {one_ms:9.1f} {tok(one_ms,1):10.0f} {tok(one_ms,1)/tok(step_ms,2):8.2f}")
hook = torch.get("pytorch-ddp-gloo-fp16")
if hook:
    print(f"\nours / PyTorch gloo-DDP+fp16 hook: {tok(step_ms,2)/hook[0]:.2f}x (target >= 2.5x)")
EOF
stamp "end"
