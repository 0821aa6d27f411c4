#!/usr/bin/env bash
# bench-gpu-vs-pytorch.sh — GPT-2 small (124M, T=1024, fp16 AMP, AdamW) training steps on one GPU:
# goddp's CUDA device and PyTorch eager (autocast fp16 + GradScaler, fused AdamW, SDPA) in one run,
# side by side with the ratio. Run it on the GPU host from the repository root, inside the Go
# environment (e.g. `bash .gpu/run bash scripts/bench-gpu-vs-pytorch.sh`).
#
#   BATCHES=16,8   batch sizes          STEPS=20   timed steps per batch (median reported)
#   OUT=dir        where logs go (default ./out/bench-gpu)
#   PROFILE=1      also print goddp's per-kernel time for one step
#   COMPILE=0      skip torch.compile (on by default: the table has both ratios)
#   TRAINER=0      skip the ddptrain rows (on by default; TSTEPS=60 steps each)
#   EAGER=0        skip PyTorch eager
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
if [ "${EAGER:-1}" != 0 ]; then
  PYTHONUNBUFFERED=1 python3 scripts/bench_gpt2_pytorch.py --batch "$BATCHES" --steps "$STEPS" 2>&1 | tee "$OUT/pytorch.log"
fi
# The trainer itself (issue 17's target): ddptrain on configs/gpt2-124m.yaml (byte-level text, so
# no shards are needed: the same model and step), TSTEPS steps per batch, the median of its logged
# windows after the first, as a RESULT line like the others.
if [ "${TRAINER:-1}" != 0 ]; then
  bash scripts/cuda-env.sh go build -tags cuda -o "$OUT/bin/" ./cmd/ddptrain
  for b in ${BATCHES//,/ }; do
    "$OUT/bin/ddptrain" --config configs/gpt2-124m.yaml --set data.kind=text --set data.path= --device cuda --set train.micro_batch=$b \
      --set train.global_batch=$b --set train.max_steps=${TSTEPS:-60} --set train.log_every=10 --set checkpoint.dir= \
      --metrics "$OUT/trainer-$b.jsonl" > "$OUT/trainer-$b.log" 2>&1 || { tail -3 "$OUT/trainer-$b.log"; continue; }
    grep '"event":"step"' "$OUT/trainer-$b.jsonl" | sed -n '2,$p' | sed 's/.*"step_ms":\([0-9.]*\).*/\1/' | sort -n |
      awk -v b=$b -v peak="$(grep -o '"peak_memory_bytes":[0-9]*' "$OUT/trainer-$b.jsonl" | tail -1 | cut -d: -f2)" \
        '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "RESULT goddp-ddptrain %d 1024 %.0f %.2f %.2f\n", b, b*1024*1000/m, m, peak/2^30}' |
      tee -a "$OUT/goddp.log"
  done
fi
if [ "${COMPILE:-1}" != 0 ]; then # torch.compile of the same model (its warm-up compiles; not timed)
  PYTHONUNBUFFERED=1 python3 scripts/bench_gpt2_pytorch.py --batch "$BATCHES" --steps "$STEPS" --compile 2>&1 | tee "$OUT/pytorch-compile.log"
fi

echo
echo "GPT-2 124M train step, T=1024, fp16 AMP, AdamW — $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
grep -hs '^RESULT' "$OUT/goddp.log" "$OUT"/pytorch*.log | awk '
  { key = $3; impl = $2; tps[impl, key] = $5; ms[impl, key] = $6; gib[impl, key] = $7; if (!(key in seen)) { seen[key] = 1; order[n++] = key } }
  function ratio(a, b) { return (b > 0) ? a / b : 0 }
  END {
    printf "%-6s %-8s | %12s %8s %8s | %12s %8s %8s | %12s %8s %8s | %8s %8s | %8s %8s\n", "batch", "goddp", "tok/s", "ms", "GiB", "eager tok/s", "ms", "GiB", "compile tok/s", "ms", "GiB", "vs eager", "memory", "vs comp.", "memory"
    for (i = 0; i < n; i++) for (gi = 0; gi < 2; gi++) { k = order[i]; g = gi ? "goddp-ddptrain" : "goddp"; e = "pytorch"; c = "pytorch-compile"
      if (!((g, k) in tps)) continue
      printf "%-6s %-8s | %12d %8.1f %8.2f | %12d %8.1f %8.2f | %12d %8.1f %8.2f | %7.2fx %7.2fx | %7.2fx %7.2fx\n", k, gi ? "ddptrain" : "model",
        tps[g, k], ms[g, k], gib[g, k], tps[e, k], ms[e, k], gib[e, k], tps[c, k], ms[c, k], gib[c, k],
        ratio(tps[g, k], tps[e, k]), ratio(gib[g, k], gib[e, k]), ratio(tps[g, k], tps[c, k]), ratio(gib[g, k], gib[c, k]) }
  }'
