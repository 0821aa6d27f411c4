#!/usr/bin/env bash
# bench-gpu-variants.sh NAME=ENV... — GPT-2 small's model bench (TestCUDA_gpt2Bench) on one GPU,
# one build, each variant (a name and the environment it sets) run in turn for ROUNDS rounds, so
# an off-default knob is measured against the default on the machine as it is now. Run on the GPU
# host inside the Go environment, e.g. the issue-35 knobs:
#   bash .gpu/run bash scripts/bench-gpu-variants.sh base= epilogue=GODDP_GEMM_EPILOGUE=1 rows128=GODDP_FLASH_ROWS=128
# A variant's ENV is space-separated assignments after the first '='. Prints each run and, per
# batch and variant, the median step, its ratio to the first variant's and the peak allocated.
#   ROUNDS=3 BATCHES="16 8" STEPS=20 OUT=dir (default out/bench-gpu-variants). Variants with
#   the tuner on (GODDP_LT_TUNE unset or 1) also print its choices (its stderr lines) at the end.
# TRAINER=1: ddptrain itself instead of the model bench (knobs of the trainer's own step: its
# loss scaler, its step's end), each run TSTEPS=40 steps logged every 10, its step the median of
# the logged windows after the first (stage3_metrics.py step), its peak the summary's; CONFIG
# (configs/gpt2-124m.yaml on byte-level text) and DEVICE (cuda; cpu with a small CONFIG runs the
# script anywhere, as scripts/gpu-stage3-check.sh does).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -ge 2 ] || { echo "usage: bench-gpu-variants.sh NAME=[ENV ...] NAME=[ENV ...] ..." >&2; exit 2; }
ROUNDS=${ROUNDS:-3}; BATCHES=${BATCHES:-16 8}; STEPS=${STEPS:-20}
OUT=${OUT:-out/bench-gpu-variants}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
TRAINER=${TRAINER:-}; DEVICE=${DEVICE:-cuda}; CONFIG=${CONFIG:-configs/gpt2-124m.yaml}; TSTEPS=${TSTEPS:-40}
if [ -n "$TRAINER" ]; then
  if [ "$DEVICE" = cuda ]; then
    bash scripts/cuda-env.sh go build -tags cuda -o "$OUT/bin/" ./cmd/ddptrain
  else
    go build -o "$OUT/bin/" ./cmd/ddptrain
  fi
else
  bash scripts/cuda-env.sh go test -tags cuda -c -o "$OUT/model.test" ./model/
fi
# run NAME ENV B LOG: one run of variant NAME at batch B; prints "RESULT name b tok/s ms GiB"-like
# fields as the model bench's RESULT line does (the step in field 6, the peak in 7).
run() {
  local name=$1 env=$2 b=$3 log=$4
  if [ -z "$TRAINER" ]; then
    # shellcheck disable=SC2086 # env is a list of assignments
    (cd model && env $env GODDP_BENCH="$b" GODDP_BENCH_STEPS="$STEPS" "$OUT/model.test" -test.run '^TestCUDA_gpt2Bench$' -test.v) > "$log" 2>&1
    return
  fi
  local jl="${log%.log}.jsonl"
  rm -f "$jl"
  # shellcheck disable=SC2086 # env is a list of assignments
  env $env "$OUT/bin/ddptrain" --config "$CONFIG" --set data.kind=text --set data.path= --device "$DEVICE" \
    --set train.micro_batch="$b" --set train.global_batch="$b" --set train.max_steps="$TSTEPS" --set train.log_every=10 \
    --set checkpoint.dir= --metrics "$jl" > "$log" 2>&1 || return
  local ms peak
  ms=$(python3 scripts/stage3_metrics.py step "$jl") || return
  peak=$(python3 scripts/stage3_metrics.py summary "$jl" peak_memory_bytes)
  awk -v b="$b" -v m="$ms" -v p="${peak:-0}" 'BEGIN {printf "RESULT ddptrain %d 1024 %.0f %.2f %.2f\n", b, b*1024*1000/m, m, p/2^30}' >> "$log"
}
: > "$OUT/runs.txt"
for r in $(seq "$ROUNDS"); do
  for v in "$@"; do
    name=${v%%=*}; env=${v#*=}
    for b in $BATCHES; do
      log="$OUT/$name.b$b.$r.log"
      run "$name" "$env" "$b" "$log" || echo "$name batch $b round $r: exit $? (see $log)"
      awk -v n="$name" -v r="$r" '/^RESULT/ {print n, $3, r, $6, $7}' "$log" | tee -a "$OUT/runs.txt"
    done
  done
done
echo
what="model bench, GPT-2 small, T 1024"
[ -n "$TRAINER" ] && what="ddptrain on $CONFIG, $DEVICE, $TSTEPS steps"
echo "median step ms over $ROUNDS rounds ($what)"
first=${1%%=*}
for b in $BATCHES; do
  base=$(awk -v n="$first" -v b="$b" '$1 == n && $2 == b {print $4}' "$OUT/runs.txt" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  for v in "$@"; do
    name=${v%%=*}
    vals=$(awk -v n="$name" -v b="$b" '$1 == n && $2 == b {print $4}' "$OUT/runs.txt" | sort -n)
    med=$(echo "$vals" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    if [ -n "$med" ] && [ -n "$base" ]; then
      peak=$(awk -v n="$name" -v b="$b" '$1 == n && $2 == b && $5 != "" {p = $5} END {print p}' "$OUT/runs.txt")
      printf "batch %-3s %-12s %8.2f  x%.3f  peak %5s GiB  (%s)\n" "$b" "$name" "$med" "$(awk -v m="$med" -v b0="$base" 'BEGIN {print m / b0}')" "${peak:--}" "$(echo "$vals" | tr "\n" " ")"
    else
      printf "batch %-3s %-12s %8s  (no result)\n" "$b" "$name" "-"
    fi
  done
done
# GODDP_LT_TUNE's choices (model/cuda/lt_tune.go: one stderr line per tuned plan), the first
# round's, per variant that tuned.
for v in "$@"; do
  name=${v%%=*}
  lines=$(cat "$OUT/$name".b*.1.log 2>/dev/null | grep -h "GODDP_LT_TUNE:" | sort -u || true)
  [ -z "$lines" ] || { echo; echo "$name: the tuner's choices (first round)"; echo "$lines"; }
done
