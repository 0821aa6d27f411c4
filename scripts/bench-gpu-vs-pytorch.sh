#!/usr/bin/env bash
# bench-gpu-vs-pytorch.sh — GPT-2 small (124M, T=1024, fp16 AMP, AdamW) training steps on one GPU:
# goddp's CUDA device and PyTorch eager (autocast fp16 + GradScaler, fused AdamW, SDPA) in one run,
# side by side with the ratio. Run it on the GPU host from the repository root, inside the Go
# environment (e.g. `bash .gpu/run bash scripts/bench-gpu-vs-pytorch.sh`).
#
#   BATCHES=16,8   batch sizes          STEPS=20   timed steps per batch (median reported)
#   OUT=dir        where logs go (default ./out/bench-gpu)
#   PROFILE=1      also print goddp's per-kernel time for one step
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BATCHES=${BATCHES:-16,8}
STEPS=${STEPS:-20}
OUT=${OUT:-out/bench-gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

bash scripts/cuda-env.sh go test -tags cuda -c -o "$OUT/model.test" ./model/
(cd model && GODDP_BENCH=$BATCHES GODDP_BENCH_STEPS=$STEPS GODDP_PROFILE=${PROFILE:-} \
  "$OUT/model.test" -test.run '^TestCUDA_gpt2Bench$' -test.v) 2>&1 | tee "$OUT/goddp.log"
PYTHONUNBUFFERED=1 python3 scripts/bench_gpt2_pytorch.py --batch "$BATCHES" --steps "$STEPS" 2>&1 | tee "$OUT/pytorch.log"

echo
echo "GPT-2 124M train step, T=1024, fp16 AMP, AdamW — $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
grep -h '^RESULT' "$OUT/goddp.log" "$OUT/pytorch.log" | awk '
  { key = $3; impl = $2; tps[impl, key] = $5; ms[impl, key] = $6; gib[impl, key] = $7; if (!(key in seen)) { seen[key] = 1; order[n++] = key } }
  END {
    printf "%-6s | %12s %9s %9s | %12s %9s %9s | %8s %8s\n", "batch", "goddp tok/s", "ms", "peak GiB", "torch tok/s", "ms", "peak GiB", "speed", "memory"
    for (i = 0; i < n; i++) { k = order[i]
      r = (tps["pytorch", k] > 0) ? tps["goddp", k] / tps["pytorch", k] : 0
      m = (gib["pytorch", k] > 0) ? gib["goddp", k] / gib["pytorch", k] : 0
      printf "%-6s | %12d %9.1f %9.2f | %12d %9.1f %9.2f | %7.2fx %7.2fx\n", k, tps["goddp", k], ms["goddp", k], gib["goddp", k], tps["pytorch", k], ms["pytorch", k], gib["pytorch", k], r, m }
  }'
