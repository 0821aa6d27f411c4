#!/usr/bin/env bash
# step-diag.sh — where ddptrain's step goes beside the model's step alone, on one GPU (issue 33's
# ResNet-50, issue 35's GPT-2 small):
#
#   1. ddptrain at batch B: STEPS steps with --trace, then the median of each span of the steps
#      after the first five (data, forward, backward enqueue, backward — the trace syncs after it
#      —, inf check, optimizer) and the metrics' median step_ms and data_ms.
#   2. The same run without --trace and with --profile-step 10 --profile-steps 2: the
#      unsynchronised step's time, the device's per-kernel table of steps 10 and 11 (GPU ms, count,
#      host ms per kernel name) and its gaps between kernels (where the GPU waited, the time
#      between the two steps among them).
#   3. The model step alone, the same kernels without the trainer: ResNet-50's
#      TestCUDA_resnet50Profile (median step, host enqueue time, per-kernel table) or GPT-2's
#      TestCUDA_gpt2Bench with GODDP_PROFILE=1.
#
# Run on the GPU host from the repository root inside the Go environment:
#   bash .gpu/run bash scripts/step-diag.sh
#   MODEL=resnet (configs/resnet50-synthetic.yaml, NHWC, synthetic images) | gpt2
#   (configs/gpt2-124m.yaml on byte-level text: no shards needed)
#   B=64 (gpt2: 16)  PREC=fp16  STEPS=30  WORKERS=8  OUT=dir (default ./out/step-diag)  SKIP_MODEL=1
#   EXTRA="--set key=value ..." (more ddptrain settings)
# Logs under OUT; the summary last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
MODEL=${MODEL:-resnet}
case $MODEL in
resnet) B=${B:-64} ;;
gpt2) B=${B:-16} ;;
*) echo "step-diag: MODEL=$MODEL: want resnet or gpt2"; exit 2 ;;
esac
PREC=${PREC:-fp16}
STEPS=${STEPS:-30}
WORKERS=${WORKERS:-8}
OUT=${OUT:-out/step-diag}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
bin="$OUT/bin"
bash scripts/cuda-env.sh go build -tags cuda,cudnn -o "$bin/" ./cmd/ddptrain || { echo "build failed"; exit 1; }
# shellcheck disable=SC2206
extra=(${EXTRA:-})
if [ "$MODEL" = resnet ]; then
  model=(--config configs/resnet50-synthetic.yaml --set model.layout=nhwc --set "data.workers=$WORKERS")
else
  model=(--config configs/gpt2-124m.yaml --set data.kind=text --set data.path=)
fi
args=(--device cuda "${model[@]}" --set checkpoint.dir= --set "precision=$PREC"
  --set "train.micro_batch=$B" --set "train.global_batch=$B" --set "train.max_steps=$STEPS"
  --set train.log_every=5 --set train.eval_batches=0 "${extra[@]}")

"$bin/ddptrain" "${args[@]}" --trace "$OUT/trace.json" --metrics "$OUT/traced.jsonl" > "$OUT/traced.log" 2>&1
echo "traced run exit $?"
"$bin/ddptrain" "${args[@]}" --profile-step 10 --profile-steps 2 --metrics "$OUT/plain.jsonl" > "$OUT/plain.log" 2>&1
echo "plain run (--profile-step 10 --profile-steps 2) exit $?"
if [ -z "${SKIP_MODEL:-}" ]; then
  dt=f16
  [ "$PREC" = fp32 ] && dt=f32
  if [ "$MODEL" = resnet ]; then
    GODDP_RESNET_PROFILE=$B GODDP_RESNET_PROFILE_DTYPE=$dt bash scripts/cuda-env.sh \
      go test -count=1 -tags cuda,cudnn ./model/ -run 'TestCUDA_resnet50Profile$' -v > "$OUT/model.log" 2>&1
  else
    GODDP_BENCH=$B GODDP_BENCH_STEPS=20 GODDP_PROFILE=1 GODDP_BENCH_DTYPE=$PREC bash scripts/cuda-env.sh \
      go test -count=1 -tags cuda ./model/ -run 'TestCUDA_gpt2Bench$' -v > "$OUT/model.log" 2>&1
  fi
  echo "model step exit $?"
fi

echo
echo "== ddptrain steps 10-11's kernel profile (rank 0), the top 25, and the gaps between kernels"
sed -n '/kernel profile/,$p' "$OUT/plain.log" | head -28
sed -n '/^between kernels/,/^[^ ]/p' "$OUT/plain.log" | head -14
if [ -z "${SKIP_MODEL:-}" ]; then
  echo
  echo "== the model step, the top of its profile"
  grep -v '^=== RUN\|^--- \|^PASS\|^ok ' "$OUT/model.log" | head -32
fi
echo
python3 - "$OUT" "$B" "$MODEL" <<'EOF'
import json, statistics, sys
out, b = sys.argv[1], int(sys.argv[2])
tr = json.load(open(out + "/trace.json"))
ev = [e for e in tr["traceEvents"] if e.get("ph") == "X"]
spans = {}
for e in ev:
    s = (e.get("args") or {}).get("step")
    if s is not None and s < 5:
        continue
    spans.setdefault(e["name"], []).append(e["dur"] / 1000)
def med(path, key):
    v = []
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if key in r and r.get("step", 0) > 5:
            v.append(r[key])
    return statistics.median(v) if v else float("nan")
print(f"== {sys.argv[3]} batch {b}: the traced run's spans (median ms, steps after the fifth)")
for name in ["data", "forward", "backward enqueue", "backward", "inf check", "optimizer"]:
    if name in spans:
        print(f"{name:18s} {statistics.median(spans[name]):8.2f}  (n={len(spans[name])})")
print(f"{'step_ms traced':18s} {med(out + '/traced.jsonl', 'step_ms'):8.2f}")
print(f"{'step_ms plain':18s} {med(out + '/plain.jsonl', 'step_ms'):8.2f}  data_ms {med(out + '/plain.jsonl', 'data_ms'):.2f}")
EOF
grep -h "one step\|RESULT" "$OUT/model.log" 2>/dev/null
