#!/usr/bin/env bash
# gpu-stage3.sh PART — one part of the stage-3 measurements still owed on the H200, sized for one
# 10-minute device call: it runs the part's script under a time limit a little inside the call's,
# packs the logs into one archive under $OUT (the device call brings back at most 8 files, two
# folders deep) and ends with the part's table. docs/gpu-session.md says which part a session runs
# when, and where each table goes.
#
#   bf16    issue 32: bench-gpu-vs-pytorch.sh DTYPE=bf16 — goddp fp16 and bf16 (model bench and
#           ddptrain) at batch 16 and 8, PyTorch bf16 autocast eager and torch.compile, the 300-step
#           loss curves of fp16 and bf16, two workers with ddp.wire bf16 (param_sha256)
#   shard   issue 31: bench-gpu-ddp.sh ROWS=shard — 2 and 4 workers sharing the GPU with
#           ddp.shard_optimizer off/on (step, per-rank peak and static memory, param_sha256), the
#           largest micro-batch under 16 GiB off/on
#   ipc     issue 34: bench-gpu-ddp.sh ROWS=device — the CUDA IPC all-reduce beside the host ring
#           (2 and 4 processes), ddp.intra_host host, copies and device at N = 2 and 4 (a row
#           that the run refuses is SKIPPED, quoting the refusal)
#   resnet  issue 33: bench-resnet.sh (its tests skipped: gpu-check.sh ran them) — ResNet-50 goddp
#           fp32/fp16/fp16+checkpointing, the largest batch under 16 GiB, PyTorch eager and compiled
#   memory  issue 33's last point: bench-memory.sh — GPT-2's docs/perf-memory.md table again under
#           the reserved-bytes budget rule, PyTorch beside it
#
# On the GPU host, from the repository root, inside the Go environment:
#   bash .gpu/run bash scripts/gpu-stage3.sh bf16              (main checkout; carry [".gpu"])
#   bash .gpu/run --tree NAME bash scripts/gpu-stage3.sh bf16  (a worktree packed by bundle --tree)
# PART may also come as PART=bf16. LIMIT=570 (seconds for the part; the call's limit is 600).
# LOGS=dir (default /tmp/goddp-stage3/PART-TIME, new each run: everything the part writes; kept out
# of $OUT).
# OUT=dir (default out/gpu-stage3): stage3-PART.txt (the console) and stage3-PART-logs.tar.gz.
# PRINT_ONLY=1 prints the commands instead (no GPU, no build): see scripts/gpu-stage3-check.sh.
# Extra variables (BATCHES=, WS=, NS=, STEPS=, ...) pass through to the part's script.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
. scripts/stage3-lib.sh
PART=${1:-${PART:-}}
LIMIT=${LIMIT:-570}
case $PART in
bf16) cmd=(env DTYPE=bf16 bash scripts/bench-gpu-vs-pytorch.sh) ;;
shard) cmd=(env ROWS=shard bash scripts/bench-gpu-ddp.sh) ;;
ipc) cmd=(env ROWS=device bash scripts/bench-gpu-ddp.sh) ;;
resnet) cmd=(env SKIP_TESTS=1 bash scripts/bench-resnet.sh) ;;
memory) cmd=(env SKIP_TESTS=1 bash scripts/bench-memory.sh) ;;
*)
  echo "gpu-stage3.sh: part '${PART}': want bf16, shard, ipc, resnet or memory (one per 10-minute call; docs/gpu-session.md)" >&2
  exit 2
  ;;
esac
OUT=${OUT:-out/gpu-stage3}
LOGS=${LOGS:-/tmp/goddp-stage3/$PART-$(date +%s)}
mkdir -p "$OUT" "$LOGS"
OUT=$(cd "$OUT" && pwd)
LOGS=$(cd "$LOGS" && pwd)
t0=$(date +%s)
echo "gpu-stage3 $PART: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ); logs in $LOGS"

if [ -n "${PRINT_ONLY:-}" ]; then
  case $PART in
  resnet | memory) x env OUT="$LOGS" "${cmd[@]}" ;; # these scripts have no dry run of their own
  *) env OUT="$LOGS" "${cmd[@]}" ;;              # PRINT_ONLY passes through: they print their commands
  esac
  exit $?
fi

nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
# The part runs in its own process group under the limit, so what it started ends with it and the
# archive and the table below still come back inside the call.
timeout --kill-after=10 "$LIMIT" env OUT="$LOGS" "${cmd[@]}" > "$LOGS/console.log" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
cp "$LOGS/console.log" "$OUT/stage3-$PART.txt"
tar -czf "$OUT/stage3-$PART-logs.tar.gz" -C "$LOGS" --exclude=bin --exclude='*.test' --exclude='*.trace*.json' --exclude='*.bin' . 2>/dev/null ||
  echo "gpu-stage3: packing the logs failed"
# The console's end is the part's table (each script prints its table last).
tail -n "${TAIL:-45}" "$LOGS/console.log"
echo
case $rc in
0) echo "gpu-stage3 $PART: done in ${secs} s" ;;
124 | 137) echo "gpu-stage3 $PART: STOPPED at the ${LIMIT} s limit after ${secs} s (the table above is partial or missing; the logs say how far it got)" ;;
*) echo "gpu-stage3 $PART: exit $rc after ${secs} s" ;;
esac
echo "logs: $OUT/stage3-$PART.txt, $OUT/stage3-$PART-logs.tar.gz ($(du -h "$OUT/stage3-$PART-logs.tar.gz" 2>/dev/null | cut -f1))"
exit "$rc"
